package main

import (
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

// globalFlags are accepted before or after the command name.
func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dir", Value: ".", EnvVars: []string{"FENCE_DIR"}, Usage: "root of the task tree"},
		&cli.BoolFlag{Name: "json", Usage: "print results as JSON (errors as one JSON object on stderr)"},
		&cli.DurationFlag{Name: "timeout", Value: fence.DefaultTimeout, EnvVars: []string{"FENCE_TIMEOUT"}, Usage: "how long to wait for the journal lock before exit 5 (busy)"},
	}
}

// jsonFlag is --json on each command, so it works after the command too.
var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print the result as JSON"}

func agentFlag() cli.Flag {
	return &cli.StringFlag{Name: "agent", EnvVars: []string{"FENCE_AGENT"}, Usage: "agent name, recorded in the journal (default user@host); never authorises anything"}
}

// tokenFlag is --token for the fenced commands; those read FENCE_TOKEN too
// (fencectl run exports it). claim defines its own without the variable:
// restoring a claim must be asked for explicitly.
func tokenFlag() cli.Flag {
	return &cli.Uint64Flag{Name: "token", EnvVars: []string{"FENCE_TOKEN"}, Usage: "the fencing token your claim returned (required)"}
}

func reasonFlag() cli.Flag {
	return &cli.StringFlag{Name: "reason", Usage: "why, recorded in the journal"}
}

// agentName is --agent, FENCE_AGENT, or user@host.
func agentName(c *cli.Context) string {
	if a := c.String("agent"); a != "" {
		return a
	}
	return defaultAgent()
}

// checkAgentAndReason refuses control characters in --agent and --reason
// before anything is written (see checkText).
func checkAgentAndReason(c *cli.Context) error {
	if err := checkText("agent", c.String("agent")); err != nil {
		return err
	}
	return checkText("reason", c.String("reason"))
}

// defaultAgent is user@host.
func defaultAgent() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return name + "@" + host
}

// openTree opens the tree named by --dir / FENCE_DIR.
func openTree(c *cli.Context, out *output) (*fence.Tree, error) {
	timeout := c.Duration("timeout")
	if timeout < 0 {
		return nil, usagef("invalid --timeout %s: must not be negative", timeout)
	}
	// FENCE_LOCK_MODE=bbolt is for benchmarks only (see README): it drops
	// the blocking flock to show what bbolt's 50 ms lock polling costs.
	boltOnly := os.Getenv("FENCE_LOCK_MODE") == "bbolt"
	return fence.Open(c.String("dir"), fence.Options{Timeout: timeout, Notify: out.notice, BoltLockOnly: boltOnly})
}

// withTree opens the tree, runs fn and closes it (CloseAtExit when the
// process ends right after).
func withTree(c *cli.Context, out *output, fn func(*fence.Tree) error) error {
	t, err := openTree(c, out)
	if err != nil {
		return err
	}
	if exitsAfterRun {
		defer t.CloseAtExit()
	} else {
		defer t.Close()
	}
	return fn(t)
}

// oneArg returns the single positional argument a command takes.
func oneArg(c *cli.Context, what string) (string, error) {
	switch c.NArg() {
	case 1:
		return c.Args().First(), nil
	case 0:
		return "", usagef("missing %s: usage: fencectl %s", what, c.Command.UsageText)
	}
	return "", usagef("too many arguments %q: usage: fencectl %s", c.Args().Slice(), c.Command.UsageText)
}

// optionalArg returns the optional single positional argument.
func optionalArg(c *cli.Context) (string, error) {
	if c.NArg() > 1 {
		return "", usagef("too many arguments %q: usage: fencectl %s", c.Args().Slice(), c.Command.UsageText)
	}
	return c.Args().First(), nil
}

// requireToken checks --token was given.
func requireToken(c *cli.Context) (uint64, error) {
	tok := c.Uint64("token")
	if tok == 0 {
		return 0, usagef("missing --token: every change to a claimed task must show the token its claim returned")
	}
	return tok, nil
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func fmtLeft(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("expired %s ago", (-d).Round(time.Second))
	}
	return "in " + d.Round(time.Second).String()
}
