// Command fencectl coordinates agents that share a directory of tasks:
// fenced claims, leases, and a journal that never lets a stale agent act.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

func main() {
	exitsAfterRun = true
	if err := checkHandoff(); err != nil {
		fmt.Fprintln(os.Stderr, "fencectl: "+err.Error())
		os.Exit(exitError)
	}
	os.Exit(run(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// exitsAfterRun is set when this process ends with the command it runs
// (main), not when a test calls run in-process; see withTree.
var exitsAfterRun bool

// run builds the app, runs it and turns the outcome into an exit code. It
// is the only place that decides how an error is shown.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	return runOut(ctx, args, &output{stdin: stdin, stdout: &answerWriter{w: stdout}, stderr: stderr})
}

// runOut is run with the output made: a daemon (daemon.go) sets what it
// serves on it.
func runOut(ctx context.Context, args []string, out *output) (code int) {
	out.args = args
	// No Go stack trace ever reaches a user: a fault reading a damaged
	// journal through mmap becomes a panic here (SetPanicOnFault), and any
	// panic becomes exit 1 with a message.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			code = out.fail(fmt.Errorf("internal error: %v (nothing after the last completed step was changed; `fencectl replay --check` verifies the tree)", r))
		}
	}()
	if out.served != nil {
		out.parsed = parseAlone()
		defer out.parsed()
	}
	app := newApp(out, args)
	out.json = wantsJSON(app, args)
	args, err := reorderArgs(app, args)
	if err == nil {
		err = app.RunContext(ctx, args)
	}
	if err == nil && out.notFound != "" {
		err = unknownCommand(app, out.notFound)
	}
	if err == nil {
		err = out.answerLost(commandName(app, args))
	}
	if err == nil {
		out.flushNotices()
		return 0
	}
	var exit cli.ExitCoder
	if errors.As(err, &exit) && exit.ExitCode() == 0 {
		return 0
	}
	if f, ok := errors.AsType[forwarded](err); ok {
		return f.code // a daemon ran it, and its output is written
	}
	return out.fail(err)
}

// commandName is the command args run, for messages ("step" if none).
func commandName(app *cli.App, args []string) string {
	for _, a := range args[min(len(args), 1):] {
		if !strings.HasPrefix(a, "-") && app.Command(a) != nil {
			return a
		}
	}
	return "step"
}

// newApp assembles the commands; each lives in its own file. With args,
// it assembles only the command they name (see commandsFor); without, all.
func newApp(out *output, args []string) *cli.App {
	app := &cli.App{
		Name:  "fencectl",
		Usage: "fenced claims on a shared directory of tasks",
		Description: `Agents claim tasks from a plain directory tree (available/ → claimed/ → done/).
A journal in .fence/ issues a fencing token with every claim; every later step
must show the current token, so an agent that lost its lease is refused.

   fencectl init                          # make a tree in . (or --dir / FENCE_DIR)
   echo "build x" | fencectl add --id build-x -
   env=$(fencectl claim --agent a1 --format env) && eval "$env"
   fencectl heartbeat "$FENCE_TASK" --token "$FENCE_TOKEN"
   fencectl complete "$FENCE_TASK" --token "$FENCE_TOKEN"

Exit codes: 0 ok, 1 error, 2 bad input, 3 fenced (stale token), 4 nothing to
claim / not available, 5 busy, 6 no such task, 7 drift; 141 claim or run
stopped because its stdout had no reader (nothing claimed, task released).`,
		Version:         buildVersion(),
		Reader:          out.stdin,
		Writer:          out.stdout,
		ErrWriter:       out.stderr,
		Flags:           globalFlags(),
		Commands:        commandsFor(out, args),
		ExitErrHandler:  func(*cli.Context, error) {}, // run() chooses the exit code
		OnUsageError:    onUsageError,
		CommandNotFound: func(_ *cli.Context, name string) { out.notFound = name },
		HideHelpCommand: true, // ours is helpCommand, in the list with the others
		Metadata:        map[string]any{outputKey: out},
	}
	// Every variable is read after the command line, for the flags it
	// left out (see envHold).
	env := envHold{}
	app.Before = env.beforeCommand
	// Whatever a command's own file defines, every command:
	for _, c := range app.Commands {
		c.OnUsageError = onUsageError
		if c.Name != helpCommandName {
			c.Before = func(c *cli.Context) error {
				if out.parsed != nil {
					out.parsed()
				}
				if err := env.read(c); err != nil {
					return err
				}
				return checkCommand(c)
			}
		}
		// reads no positional word as help (reorderArgs handles -h/--help);
		c.HideHelp, c.HideHelpCommand = true, true
		// reads numbers in decimal only;
		c.Flags = strictNumbers(c.Flags)
		// (with names worked out once: flagnames.go);
		c.Flags = nameOnce(c.Flags)
		// and shows its usage as the user types it.
		c.UsageText = "fencectl " + c.UsageText
	}
	// urfave adds --help only along with its own help command.
	app.Flags = append(nameOnce(strictNumbers(app.Flags)), cli.HelpFlag)
	// urfave shows the app's help (--help, or no command) before any
	// Before runs, so there the global flags keep their variables: the
	// help lists them.
	if commandWord(args) != "" {
		env.hold(app.Flags)
	}
	return app
}

// unknownCommand refuses a command name, suggesting the nearest one.
func unknownCommand(app *cli.App, name string) error {
	if near := closest(name, commandNames(app.Commands)); near != "" {
		return usagef("unknown command %q; did you mean %q? (run `fencectl --help` for the list)", name, near)
	}
	return usagef("unknown command %q: run `fencectl --help` for the list", name)
}

// commandMakers is every command, by name, in the order of the help.
var commandMakers = []struct {
	name string
	make func(*output) *cli.Command
}{
	{"init", initCommand},
	{"add", addCommand},
	{"claim", claimCommand},
	{"heartbeat", heartbeatCommand},
	{"verify", verifyCommand},
	{"complete", completeCommand},
	{"release", releaseCommand},
	{"fail", failCommand},
	{"reap", reapCommand},
	{"revoke", revokeCommand},
	{"cancel", cancelCommand},
	{"requeue", requeueCommand},
	{"set", setCommand},
	{"defaults", defaultsCommand},
	{"status", statusCommand},
	{"show", showCommand},
	{"list", listCommand},
	{"log", logCommand},
	{"serve", serveCommand},
	{"replay", replayCommand},
	{"recover", recoverCommand},
	{"compact", compactCommand},
	{"run", runCommand},
	{"put", putCommand},
	{"mcp", mcpCommand},
	{"daemon", daemonCommand},
	{"guide", guideCommand},
	{helpCommandName, func(*output) *cli.Command { return helpCommand() }},
}

func commands(out *output) []*cli.Command {
	all := make([]*cli.Command, 0, len(commandMakers))
	for _, m := range commandMakers {
		all = append(all, m.make(out))
	}
	return all
}

// commandsFor is the command args name, alone, when they name one and ask
// for no help; else every command (the help, --version, an unknown name
// and its suggestion need them all). A claim is one process start, and
// building the 25 other commands and their flags cost it about 3% of its
// CPU, more than urfave/cli's parse of its own flags.
func commandsFor(out *output, args []string) []*cli.Command {
	if name := commandWord(args); name != "" && name != helpCommandName {
		for _, m := range commandMakers {
			if m.name == name {
				return []*cli.Command{m.make(out)}
			}
		}
	}
	return commands(out)
}

// commandWord is the command args name: the first word after the global
// flags (and their values), or "" if there is none or args ask for help
// anywhere (reorderArgs turns `CMD --help` into `help CMD`).
func commandWord(args []string) string {
	if len(args) < 2 {
		return ""
	}
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if isFlag(a) {
			if n := flagName(a); n == "help" || n == "h" {
				return ""
			}
		}
	}
	globals := flagArity(globalFlags())
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !isFlag(a) {
			return a
		}
		if a == "--" {
			return ""
		}
		if takesValue(globals, a) {
			i++
		}
	}
	return ""
}

// usageError is bad usage: exit 2, reason invalid_input.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}
