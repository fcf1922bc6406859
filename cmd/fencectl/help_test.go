package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
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
