package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// envFlags are the flags of cmd (and the global ones) that read a
// variable, as newApp builds them (before any run takes them off).
func envFlags(cmd string) (flags []cli.Flag) {
	app := newApp(&output{}, nil)
	for _, f := range append(append([]cli.Flag{}, app.Command(cmd).Flags...), app.Flags...) {
		if df, ok := f.(cli.DocGenerationFlag); ok && len(df.GetEnvVars()) > 0 {
			flags = append(flags, f)
		}
	}
	return flags
}

// TestEnv_EveryVariableIsHeld: every flag that reads a variable is of a
// type envHold can take it off, so urfave/cli never reads one before the
// command line.
func TestEnv_EveryVariableIsHeld(t *testing.T) {
	for _, m := range commandMakers {
		for _, f := range envFlags(m.name) {
			if envField(f) == nil {
				t.Errorf("%s --%s (%T) reads %v, but envHold cannot hold it", m.name, f.Names()[0], f, f.(cli.DocGenerationFlag).GetEnvVars())
			}
		}
	}
}

// TestEnv_FlagsFirst: for every command and every flag that reads a
// variable, a malformed variable is not read when the flag is given, and
// is refused naming the variable and its value when the flag is not.
func TestEnv_FlagsFirst(t *testing.T) {
	good := map[string]string{"ttl": "5m", "timeout": "5s", "token": "5"}
	for _, m := range commandMakers {
		if m.name == helpCommandName {
			continue // reads no setting
		}
		for _, f := range envFlags(m.name) {
			name, vars := f.Names()[0], f.(cli.DocGenerationFlag).GetEnvVars()
			value, ok := good[name]
			if !ok {
				// A text variable is never malformed (checkCommand and
				// the command check its value as they check the flag's).
				if _, text := plainFlag(f).(*cli.StringFlag); !text {
					t.Errorf("%s --%s reads %v: add a good value for it here", m.name, name, vars)
				}
				continue
			}
			t.Run(m.name+"/"+name, func(t *testing.T) {
				for _, v := range vars {
					t.Setenv(v, "banana")
				}
				dir := t.TempDir()
				if err := runBefore(m.name, "--dir", dir, "--"+name, value); err != nil {
					t.Errorf("%s --%s %s with %s=banana: %v", m.name, name, value, vars[0], err)
				}
				err := runBefore(m.name, "--dir", dir)
				var usage *usageError
				if !errors.As(err, &usage) || !strings.Contains(err.Error(), vars[0]+`="banana"`) {
					t.Errorf("%s without --%s, %s=banana: got %v, want a usage error naming %s=\"banana\"", m.name, name, vars[0], err, vars[0])
				}
			})
		}
	}
}

// runBefore parses the command line of cmd as run does and runs
// everything up to the command's action, which does nothing.
func runBefore(cmd string, args ...string) error {
	argv := append([]string{"fencectl", cmd}, args...)
	app := newApp(&output{}, argv)
	app.Commands[0].Action = func(*cli.Context) error { return nil }
	argv, err := reorderArgs(app, argv)
	if err != nil {
		return err
	}
	return app.RunContext(context.Background(), argv)
}

// TestEnv_HelpListsVariables: the variables are taken off the flags only
// while urfave parses them; the help still names them.
func TestEnv_HelpListsVariables(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "[$FENCE_TIMEOUT]"},
		{[]string{"help"}, "[$FENCE_DIR]"},
		{[]string{"claim", "--help"}, "[$FENCE_TTL]"},
		{[]string{"help", "heartbeat"}, "[$FENCE_TOKEN]"},
	} {
		code, stdout, stderr := runCLI(tc.args...)
		if code != 0 || !strings.Contains(stdout, tc.want) {
			t.Errorf("fencectl %s: exit %d, want %s in the help:\n%s%s", strings.Join(tc.args, " "), code, tc.want, stdout, stderr)
		}
	}
}
