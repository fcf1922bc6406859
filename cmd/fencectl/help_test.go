package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// TestHelp_EveryCommand (issue 9, item 18): the help of every command
// shows its USAGE as typed (with the fencectl prefix), has a description,
// and no flag line carries urfave's noise: "(default: 0)" and friends for
// flags whose zero means "not given", "(required) (default: 0)", or two
// defaults.
func TestHelp_EveryCommand(t *testing.T) {
	noise := regexp.MustCompile(`\(default: (0|0s|false|"")\)|\(required\)|\(default:.*\(default:`)
	code, top, stderr := runCLI("--help")
	if code != 0 {
		t.Fatalf("--help: exit %d: %s", code, stderr)
	}
	for _, c := range newApp(&output{}, nil).Commands {
		if strings.TrimSpace(c.Usage) == "" {
			t.Errorf("%s has no description", c.Name)
		}
		if !regexp.MustCompile(`(?m)^   ` + regexp.QuoteMeta(strings.Join(c.Names(), ", ")) + `\s+\S`).MatchString(top) {
			t.Errorf("fencectl --help does not list %s with its description:\n%s", c.Name, top)
		}
		code, help, stderr := runCLI(c.Name, "--help")
		if code != 0 {
			t.Errorf("%s --help: exit %d: %s", c.Name, code, stderr)
			continue
		}
		if !strings.Contains(help, "USAGE:\n   fencectl "+c.Name) {
			t.Errorf("%s --help: USAGE lacks the fencectl prefix:\n%s", c.Name, help)
		}
		for _, line := range strings.Split(help, "\n") {
			if noise.MatchString(line) {
				t.Errorf("%s --help: %q", c.Name, line)
			}
		}
	}
	for _, line := range strings.Split(top, "\n") {
		if noise.MatchString(line) {
			t.Errorf("--help: %q", line)
		}
	}
}

// docs/agents.md is the guide as `fencectl guide --generic` prints it.
func TestGuide_DocIsTheGenericGuide(t *testing.T) {
	b, err := os.ReadFile("../../docs/agents.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := renderGuide(genericGuide); string(b) != want {
		t.Errorf("docs/agents.md differs from `fencectl guide --generic`: regenerate it with\n  go run ./cmd/fencectl guide --generic > docs/agents.md")
	}
}

// TestHelp_UsageDefaultsAreTheFlagsDefaults: a default a USAGE line shows
// (`init [--retry-backoff 1s]`) is the flag's own default; it once said
// 0s where the flag's default was 1s.
func TestHelp_UsageDefaultsAreTheFlagsDefaults(t *testing.T) {
	shown := regexp.MustCompile(`\[--([a-z][a-z0-9-]*) ([0-9][^\] ]*)\]`)
	checked := 0
	for _, c := range newApp(&output{}, nil).Commands {
		for _, m := range shown.FindAllStringSubmatch(c.UsageText, -1) {
			var def string
			for _, f := range c.Flags {
				if df, ok := f.(cli.DocGenerationFlag); ok && slices.Contains(f.Names(), m[1]) {
					def = df.GetValue()
				}
			}
			want, err1 := time.ParseDuration(m[2])
			got, err2 := time.ParseDuration(def)
			if err1 == nil && err2 == nil && want == got || def == m[2] {
				checked++
				continue
			}
			t.Errorf("%s: USAGE shows --%s %s, but its default is %q", c.Name, m[1], m[2], def)
		}
	}
	if checked == 0 {
		t.Error("no USAGE line shows a default: the check checks nothing")
	}
}

// TestGuide_EveryCommandNamesTheTree: every command the guide gives an
// agent names the tree with --dir (an agent's working directory is not
// the tree), put shows its content argument, and the heartbeat interval
// is a third of the tree's TTL, worked out.
func TestGuide_EveryCommandNamesTheTree(t *testing.T) {
	text := renderGuide(guideValues{Dir: "/srv/tasks", Backend: "bbolt", TTL: "10m0s", Heartbeat: heartbeatEvery(10 * time.Minute), MaxAttempts: "3"})
	commands := regexp.MustCompile("`(fencectl [^`]*)`|(?m)^    (fencectl .*)$").FindAllStringSubmatch(text, -1)
	n := 0
	for _, m := range commands {
		cmd := m[1] + m[2]
		if len(strings.Fields(cmd)) <= 2 { // a mention: `fencectl run`, `fencectl guide`
			continue
		}
		n++
		if !strings.HasPrefix(cmd, "fencectl --dir /srv/tasks ") {
			t.Errorf("the guide gives %q, which does not name the tree with --dir", cmd)
		}
	}
	if n < 8 {
		t.Errorf("found %d commands in the guide, want at least the eight of the protocol and the restart", n)
	}
	if !strings.Contains(text, "`fencectl --dir /srv/tasks put ID NAME FILE --token TOKEN`") {
		t.Errorf("the guide's put shows no content argument:\n%s", text)
	}
	if !strings.Contains(text, "every 3m20s or so") || strings.Contains(text, "/3 or so") {
		t.Errorf("the guide does not say to heartbeat every 3m20s for a 10m lease:\n%s", text)
	}
}

// TestHelp_MisplacedFlagMessage: a command's flag before the command name
// is named as that command's flag, with where it goes; a flag no command
// has is unknown (see also docs_flag_misplaced.txtar).
func TestHelp_MisplacedFlagMessage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "5", "verify", "x"}, "fencectl: --token is a flag of verify, not a global flag: put it after the command name (see fencectl verify --help)\n"},
		{[]string{"--reason", "r", "fail", "x", "--token", "5"}, "fencectl: --reason is a flag of fail, not a global flag: put it after the command name (see fencectl fail --help)\n"},
		{[]string{"--loop", "claim"}, "fencectl: --loop is not a global flag: it is a flag of run and goes after the command name (see fencectl --help)\n"},
		{[]string{"--frobnicate", "status"}, "fencectl: unknown flag --frobnicate (see fencectl --help)\n"},
		{[]string{"serve", "--addr", "x"}, "fencectl: unknown flag --addr; did you mean --http? (see fencectl serve --help)\n"},
	} {
		code, _, stderr := runCLI(tc.args...)
		if code != exitUsage || stderr != tc.want {
			t.Errorf("fencectl %s: exit %d\n%s want exit %d\n%s", strings.Join(tc.args, " "), code, stderr, exitUsage, tc.want)
		}
	}
}
