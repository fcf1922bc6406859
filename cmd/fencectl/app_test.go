package main

import (
	"slices"
	"testing"
)

// TestCommandMakers_Names: every entry of the table builds the command it
// is listed under, so that a process builds the right one alone.
func TestCommandMakers_Names(t *testing.T) {
	for _, m := range commandMakers {
		if got := m.make(&output{}).Name; got != m.name {
			t.Errorf("commandMakers lists %q, which builds %q", m.name, got)
		}
	}
}

// TestCommandsFor builds the named command alone, and every command when
// the words ask for help, a version, or name no known command.
func TestCommandsFor(t *testing.T) {
	names := func(args ...string) []string {
		var n []string
		for _, c := range commandsFor(&output{}, append([]string{"fencectl"}, args...)) {
			n = append(n, c.Name)
		}
		return n
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"claim", "--agent", "a"}, []string{"claim"}},
		{[]string{"--dir", "claim", "--timeout=1s", "complete", "t1"}, []string{"complete"}},
		{[]string{"--json", "run", "--", "sh", "-c", "x --help"}, []string{"run"}},
		{[]string{"claim", "--help"}, nil},
		{[]string{"-h"}, nil},
		{[]string{"help", "claim"}, nil},
		{[]string{"--version"}, nil},
		{[]string{"clam"}, nil},
		{nil, nil},
	} {
		got := names(tc.args...)
		if tc.want == nil {
			if len(got) != len(commandMakers) {
				t.Errorf("%q built %v, want every command", tc.args, got)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q built %v, want %v", tc.args, got, tc.want)
		}
	}
}
