package main

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
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
// A new one each time: urfave/cli records on a flag that it was set, and
// a daemon runs many commands at once.
func jsonFlag() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print the result as JSON"} }

func agentFlag() cli.Flag {
	return &cli.StringFlag{Name: "agent", EnvVars: []string{"FENCE_AGENT"}, Usage: "agent name, recorded in the journal (default user@host); never authorises anything"}
}

// tokenFlag is --token for the fenced commands; those read FENCE_TOKEN too
// (fencectl run exports it). claim defines its own without the variable:
// restoring a claim must be asked for explicitly.
func tokenFlag() cli.Flag {
	return &cli.GenericFlag{Name: "token", EnvVars: []string{"FENCE_TOKEN"}, Value: tokenValue(), Usage: "the fencing token your claim returned; required"}
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

// Flags first, then environment (DESIGN.md). urfave/cli reads a flag's
// EnvVars when it sets the flag up, before it reads the command line, and
// refuses a malformed variable there: FENCE_TTL=banana failed even
// `claim --ttl 5m`, which never uses FENCE_TTL. So the variables are taken
// off each flag before urfave parses it (envHold.hold) and read afterwards,
// only for the flags the command line left out (envHold.read).

// envHold keeps the variables taken off flags until they are read.
type envHold map[cli.Flag][]string

// envField is where a flag keeps its variables; nil for a type not listed
// (TestEnv_EveryVariableIsHeld checks that no such flag has any).
func envField(f cli.Flag) *[]string {
	switch f := plainFlag(f).(type) {
	case *cli.StringFlag:
		return &f.EnvVars
	case *cli.DurationFlag:
		return &f.EnvVars
	case *cli.GenericFlag: // the number flags (strictNumbers) and --token
		return &f.EnvVars
	case *cli.BoolFlag:
		return &f.EnvVars
	}
	return nil
}

// hold takes the variables off flags.
func (h envHold) hold(flags []cli.Flag) {
	for _, f := range flags {
		if p := envField(f); p != nil && len(*p) > 0 {
			h[f], *p = *p, nil
		}
	}
}

// restore gives flags their variables back, for the help to list them.
func (h envHold) restore(flags []cli.Flag) {
	for _, f := range flags {
		if vars, ok := h[f]; ok {
			*envField(f) = vars
			delete(h, f)
		}
	}
}

// beforeCommand runs once the global flags are parsed, before the
// command's are: it gives the global flags their variables back (the app's
// help lists them) and holds the command's.
func (h envHold) beforeCommand(c *cli.Context) error {
	h.restore(c.App.Flags)
	if cmd := c.App.Command(c.Args().First()); cmd != nil {
		h.hold(cmd.Flags)
	}
	return nil
}

// read sets each flag of the command and each global flag that the
// command line did not give from the first of its variables that is set
// and not empty ("FENCE_TTL=" is unset). A value that does not parse, or
// breaks a rule of the setting (envRule), is refused naming the variable,
// its value and the rule; a variable whose flag was given is never looked
// at.
func (h envHold) read(c *cli.Context) error {
	h.restore(c.Command.Flags)
	for _, f := range append(append([]cli.Flag{}, c.Command.Flags...), c.App.Flags...) {
		df, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		name := f.Names()[0]
		for _, v := range df.GetEnvVars() {
			val := getenv(c, v)
			if val == "" || c.IsSet(name) {
				continue
			}
			if err := c.Set(name, val); err != nil {
				return usagef("invalid %s=%q (for --%s): %s; fix or unset %s, or give --%s (see fencectl %s --help)", v, val, name, valueHint([]cli.Flag{f}, name, err.Error()), v, name, c.Command.Name)
			}
			if rule := envRule(c, name); rule != "" {
				return usagef("invalid %s=%q (for --%s): %s; fix or unset %s, or give --%s", v, val, name, rule, v, name)
			}
		}
	}
	return nil
}

// envRule is the rule that the value a variable gave flag name breaks, or
// "": what checkCommand asks of the flag, and fence of a lease, asked here
// so that the message names the variable and not a flag nobody gave.
func envRule(c *cli.Context, name string) string {
	switch name {
	case "timeout":
		if c.Duration(name) < 0 {
			return "must not be negative"
		}
	case "ttl":
		if d := c.Duration(name); d < fence.MinTTL || d > fence.MaxTTL {
			return fence.TTLRule
		}
	case "agent":
		return textRule(name, c.String(name))
	case "journal":
		if _, err := fence.ParseJournalURL(c.String(name)); err != nil {
			return err.Error()
		}
	}
	return ""
}

// checkCommand runs before every command, once its variables are read
// (envHold.read): it refuses control characters in --agent and --reason
// before anything is written (see checkText), and a --dir that cannot be a
// tree.
func checkCommand(c *cli.Context) error {
	if err := checkServedTree(c); err != nil {
		return err
	}
	if err := checkText("agent", c.String("agent")); err != nil {
		return err
	}
	if err := checkText("reason", c.String("reason")); err != nil {
		return err
	}
	if err := checkEmpty(c); err != nil {
		return err
	}
	if t := c.Duration("timeout"); t < 0 {
		return usagef("invalid --timeout %s: must not be negative", t)
	}
	// A zero lease or heartbeat interval is impossible, not "the default":
	// leave the flag out for that.
	for _, name := range []string{"ttl", "heartbeat"} {
		if c.IsSet(name) && c.Duration(name) == 0 {
			return usagef("invalid --%s 0s: must be positive; leave --%s out for the default", name, name)
		}
	}
	if err := checkDir(treeRoot(c)); err != nil {
		return err
	}
	return handOff(c)
}

// outputKey keeps the command's output in the app's Metadata, for the
// steps urfave calls with the context alone.
const outputKey = "output"

// outputOf is the output of the command c runs.
func outputOf(c *cli.Context) *output {
	out, _ := c.App.Metadata[outputKey].(*output)
	return out
}

// getenv is the variable name of the command's environment: the
// client's, when a daemon runs it.
func getenv(c *cli.Context, name string) string {
	if out := outputOf(c); out != nil && out.served != nil {
		return out.served.env[name]
	}
	return os.Getenv(name)
}

// treeRoot is the tree --dir / FENCE_DIR names: the client's, as an
// absolute path, when a daemon runs the command.
func treeRoot(c *cli.Context) string {
	if out := outputOf(c); out != nil && out.served != nil {
		return out.served.root
	}
	return c.String("dir")
}

// checkEmpty refuses a text flag given as "": `--id ""` made a random id,
// `--request-id ""` no request id, `log --task ""` every task's log; an
// empty shell variable must not quietly change what a command does. An
// empty --reason is no reason, which is what it says.
func checkEmpty(c *cli.Context) error {
	for _, f := range c.Command.Flags {
		sf, ok := plainFlag(f).(*cli.StringFlag)
		if !ok || sf.Name == "reason" {
			continue
		}
		if c.IsSet(sf.Name) && c.String(sf.Name) == "" {
			return usagef("--%s is empty: give a value, or leave the flag out (see fencectl %s --help)", sf.Name, c.Command.Name)
		}
	}
	return nil
}

// checkDir refuses a --dir / FENCE_DIR that names a file ("" is .): the
// messages fence and the OS give for it ("not a directory" about
// .fence/journal.db) do not say which setting is wrong.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		return usagef("--dir / FENCE_DIR %q is not a directory: a part of its path is a file", dir)
	case err == nil && fi.Mode().IsRegular():
		return usagef("--dir / FENCE_DIR %q is a file, not a directory: point it at the root of the task tree (the directory that holds .fence/)", dir)
	case err == nil && !fi.IsDir():
		return usagef("--dir / FENCE_DIR %q is not a directory (%s): point it at the root of the task tree (the directory that holds .fence/)", dir, fi.Mode().Type())
	}
	return nil
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

// lockTimeout is --timeout for fence.Open: an explicit 0 (the default is
// 10s, so 0 was given) means "do not wait", as it does for init and
// recover, not the default wait.
func lockTimeout(c *cli.Context) (time.Duration, error) {
	timeout := c.Duration("timeout")
	if timeout < 0 {
		return 0, usagef("invalid --timeout %s: must not be negative", timeout)
	}
	if timeout == 0 {
		return fence.NoWait, nil
	}
	return timeout, nil
}

// setupOptions are the fence.Options of init and recover, which take
// --timeout as it is given: 0 or less tries the lock once.
func setupOptions(c *cli.Context) fence.Options {
	timeout := c.Duration("timeout")
	if timeout <= 0 {
		timeout = fence.NoWait
	}
	return fence.Options{Timeout: timeout, Clock: testClock, Boot: testBoot}
}

// openTree opens the tree named by --dir / FENCE_DIR.
func openTree(c *cli.Context, out *output) (*fence.Tree, error) {
	timeout, err := lockTimeout(c)
	if err != nil {
		return nil, err
	}
	if out.served != nil {
		if err := setLockMode(&fence.Options{}, out.served.root, getenv(c, "FENCE_LOCK_MODE")); err != nil {
			return nil, err
		}
		// The daemon's tree, open since an earlier command: what Open
		// warns of, this command hears too, as in its own process.
		t, err := out.served.tree(timeout)
		if err == nil {
			if w := t.PermsWarning(); w != "" {
				out.notice(fence.Notice{Kind: fence.NoticeWarning, Name: out.served.root, Detail: w})
			}
		}
		return t, err
	}
	o := fence.Options{Timeout: timeout, Notify: out.notice, Clock: testClock, Boot: testBoot}
	if err := setLockMode(&o, c.String("dir"), getenv(c, "FENCE_LOCK_MODE")); err != nil {
		return nil, err
	}
	t, err := fence.Open(c.String("dir"), o)
	if err == nil {
		treeNow = t.Now
	}
	return t, err
}

// setLockMode sets the store FENCE_LOCK_MODE asks for: the tree's own
// when unset; "bbolt", for benchmarks only (see README), drops the
// blocking flock to show what bbolt's 50 ms lock polling costs. Any other
// value is refused: a mistyped mode must not pass for the default, as
// every process on a tree must use the same one.
func setLockMode(o *fence.Options, dir, mode string) error {
	switch v := mode; v {
	case "":
	case "bbolt":
		if _, err := os.Stat(filepath.Join(dir, ".fence", "journal.json")); err == nil {
			return usagef("FENCE_LOCK_MODE=bbolt applies to a tree whose journal is .fence/journal.db, and %s keeps its journal elsewhere (.fence/journal.json names it); unset FENCE_LOCK_MODE", dir)
		}
		o.Backend = boltstore.Backend{LockMode: boltstore.LockBoltOnly}
	default:
		return usagef("invalid FENCE_LOCK_MODE=%q: the only mode is bbolt (benchmarks only); unset it", v)
	}
	return nil
}

// withTree opens the tree, runs fn and closes it (CloseAtExit when the
// process ends right after).
func withTree(c *cli.Context, out *output, fn func(*fence.Tree) error) error {
	t, err := openTree(c, out)
	if err != nil {
		return err
	}
	if out.served != nil {
		return fn(t) // the daemon's: it stays open for the next command
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
		return "", usagef("missing %s: usage: %s", what, c.Command.UsageText)
	}
	return "", usagef("too many arguments %q: usage: %s", c.Args().Slice(), c.Command.UsageText)
}

// optionalArg returns the optional single positional argument.
func optionalArg(c *cli.Context) (string, error) {
	if c.NArg() > 1 {
		return "", usagef("too many arguments %q: usage: %s", c.Args().Slice(), c.Command.UsageText)
	}
	if c.NArg() == 1 && c.Args().First() == "" {
		// As for checkEmpty's flags: `claim "$TASK"` with $TASK empty
		// must not claim the next task instead.
		return "", usagef("the argument is empty: give a value, or leave it out (usage: %s)", c.Command.UsageText)
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
