package main

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/fencectl/fencectl/fence"
)

// Issue 9, item 1: `h` and `help` are valid task ids, but `verify h
// --token 999`, `complete h`, `revoke h`… printed help and exited 0,
// changing nothing: a lost lease went unnoticed. Every word the parser
// knows (command names, flag names, help, h, version) must be read as an
// id wherever an id goes. The words and the commands come from the app
// itself, so a new command or flag is covered without touching this file.

// reservedWords is every word the CLI parser knows that is also a valid
// task id, sorted.
func reservedWords() []string {
	app := newApp(&output{}, nil)
	seen := map[string]bool{}
	add := func(w string) {
		if fence.ValidateID(w) == nil {
			seen[w] = true
		}
	}
	for _, w := range []string{"help", "h", "version", "v", "generate-bash-completion", "init-completion", "completion"} {
		add(w)
	}
	for _, n := range commandNames(app.Commands) {
		add(n)
	}
	for _, n := range flagNames(app.Flags) {
		add(n)
	}
	for _, c := range app.Commands {
		for _, n := range flagNames(c.Flags) {
			add(n)
		}
	}
	words := make([]string, 0, len(seen))
	for w := range seen {
		words = append(words, w)
	}
	sort.Strings(words)
	return words
}

// commandsWithoutID are the commands that take no task id anywhere: the
// reserved-word steps need not cover them.
var commandsWithoutID = map[string]bool{"init": true, "reap": true, "status": true, "replay": true, "recover": true, "help": true, "mcp": true, "guide": true, "serve": true, "defaults": true, "compact": true, "daemon": true}

// inProcessRunner runs the CLI in this process on tree.
func inProcessRunner(tree string) clitest.CLIRunner {
	return func(args ...string) (int, string, string) {
		return runCLI(append([]string{"--dir", tree}, args...)...)
	}
}

// TestArgs_ReservedWordsAreIDs runs every command that takes an id with
// every word the parser knows as that id (in process: the same run() as
// the binary; TestTorture_ReservedIDs and reserved_ids.txtar use the real
// binary).
func TestArgs_ReservedWordsAreIDs(t *testing.T) {
	t.Setenv("FENCE_AGENT", "reserved")
	covered := map[string]bool{}
	for _, s := range clitest.IDSteps() {
		covered[s.Cmd] = true
	}
	for _, c := range newApp(&output{}, nil).Commands {
		if !covered[c.Name] && !commandsWithoutID[c.Name] {
			t.Errorf("command %q takes no part in clitest.IDSteps: add its id-taking form there (or list it in commandsWithoutID)", c.Name)
		}
	}
	words := reservedWords()
	for _, must := range []string{"h", "help", "claim", "token", "json", "version", "run", "dry-run"} {
		if !contains(words, must) {
			t.Errorf("reservedWords() lacks %q: %v", must, words)
		}
	}
	tree := filepath.Join(t.TempDir(), "tree")
	if code, _, stderr := runCLI("--dir", tree, "init", "--retry-backoff", "0s"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	for _, w := range words {
		for _, err := range clitest.CheckReservedID(inProcessRunner(tree), w) {
			t.Errorf("id %q: %v", w, err)
		}
	}
	if _, err := os.Stat(filepath.Join(tree, "out", "help", "help")); err != nil {
		t.Errorf("put help help: %v", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
