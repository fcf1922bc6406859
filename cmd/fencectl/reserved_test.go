package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

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
	app := newApp(&output{})
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
var commandsWithoutID = map[string]bool{"init": true, "reap": true, "status": true, "replay": true, "recover": true, "help": true}

// cliRunner runs fencectl with args on a tree and returns its outcome.
type cliRunner func(args ...string) (code int, stdout, stderr string)

// idStep is one command given the word w as a task id; tok is the token of
// w's current claim (0 if none). want is the exit code that shows w was
// read as an id (help would exit 0 with no JSON), and the JSON result (or
// error) must name task w.
type idStep struct {
	cmd  string
	args func(w string, tok uint64) []string
	want int
}

// idSteps walk one task, named by a reserved word, through every command
// that takes an id, the refusals included.
func idSteps() []idStep {
	bad := func(tok uint64) string { return fmt.Sprint(tok + 1000003) } // never issued
	tk := func(tok uint64) string { return fmt.Sprint(tok) }
	return []idStep{
		{"add", func(w string, _ uint64) []string { return []string{"add", "--id", w, "--json"} }, 0},
		{"show", func(w string, _ uint64) []string { return []string{"show", w, "--json"} }, 0},
		{"log", func(w string, _ uint64) []string { return []string{"log", "--task", w, "--json"} }, 0},
		{"requeue", func(w string, _ uint64) []string { return []string{"requeue", w, "--json"} }, exitNotAvailable},
		{"revoke", func(w string, _ uint64) []string { return []string{"revoke", w, "--json"} }, exitNotAvailable},
		{"claim", func(w string, _ uint64) []string { return []string{"claim", w, "--json"} }, 0},
		{"verify", func(w string, tok uint64) []string { return []string{"verify", w, "--token", bad(tok), "--json"} }, exitFenced},
		{"verify", func(w string, tok uint64) []string { return []string{"verify", w, "--token", tk(tok), "--json"} }, 0},
		{"heartbeat", func(w string, tok uint64) []string { return []string{"heartbeat", w, "--token", bad(tok), "--json"} }, exitFenced},
		{"heartbeat", func(w string, tok uint64) []string { return []string{"heartbeat", w, "--token", tk(tok), "--json"} }, 0},
		{"put", func(w string, tok uint64) []string { return []string{"put", w, w, "--token", bad(tok), "--json"} }, exitFenced},
		{"put", func(w string, tok uint64) []string { return []string{"put", w, w, "--token", tk(tok), "--json"} }, 0},
		{"complete", func(w string, tok uint64) []string { return []string{"complete", w, "--token", bad(tok), "--json"} }, exitFenced},
		{"release", func(w string, tok uint64) []string { return []string{"release", w, "--token", bad(tok), "--json"} }, exitFenced},
		{"fail", func(w string, tok uint64) []string { return []string{"fail", w, "--token", bad(tok), "--json"} }, exitFenced},
		{"release", func(w string, tok uint64) []string { return []string{"release", w, "--token", tk(tok), "--json"} }, 0},
		{"claim", func(w string, _ uint64) []string { return []string{"claim", w, "--json"} }, 0},
		{"fail", func(w string, tok uint64) []string { return []string{"fail", w, "--token", tk(tok), "--json"} }, 0},
		{"claim", func(w string, _ uint64) []string { return []string{"claim", w, "--json"} }, 0},
		{"revoke", func(w string, _ uint64) []string { return []string{"revoke", w, "--json"} }, 0},
		{"claim", func(w string, _ uint64) []string { return []string{"claim", w, "--json"} }, 0},
		{"complete", func(w string, tok uint64) []string { return []string{"complete", w, "--token", tk(tok), "--json"} }, 0},
		{"requeue", func(w string, _ uint64) []string { return []string{"requeue", w, "--json"} }, 0},
		{"run", func(w string, _ uint64) []string { return []string{"run", w, "--json", "--", "true"} }, 0},
		{"show", func(w string, _ uint64) []string { return []string{"show", w, "--json"} }, 0},
	}
}

// checkReservedID runs every step for word w on tree and returns what went
// wrong (nil: w was read as an id everywhere). A step "misreads" when its
// exit code is not the one an id gives, or its JSON names another task.
func checkReservedID(run cliRunner, w string) []error {
	var errs []error
	var tok uint64
	for _, s := range idSteps() {
		args := s.args(w, tok)
		code, stdout, stderr := run(args...)
		if code != s.want {
			errs = append(errs, fmt.Errorf("fencectl %s: exit %d, want %d (the word read as something else?)\nstdout: %.300s\nstderr: %.300s", strings.Join(args, " "), code, s.want, stdout, stderr))
			continue
		}
		out := stdout
		if code != 0 {
			out = stderr
		}
		if s.cmd == "run" { // run's result is its summary on stderr
			out = stderr
		}
		var res struct {
			Task  string `json:"task"`
			Token uint64 `json:"token"`
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		line := lines[len(lines)-1]
		if s.cmd == "log" {
			line = lines[0]
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil || res.Task != w {
			errs = append(errs, fmt.Errorf("fencectl %s: result does not name task %q (err %v)\nstdout: %.300s\nstderr: %.300s", strings.Join(args, " "), w, err, stdout, stderr))
			continue
		}
		if s.cmd == "claim" {
			tok = res.Token
		}
	}
	return errs
}

// inProcessRunner runs the CLI in this process on tree.
func inProcessRunner(tree string) cliRunner {
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
	for _, s := range idSteps() {
		covered[s.cmd] = true
	}
	for _, c := range newApp(&output{}).Commands {
		if !covered[c.Name] && !commandsWithoutID[c.Name] {
			t.Errorf("command %q takes no part in idSteps: add its id-taking form (or list it in commandsWithoutID)", c.Name)
		}
	}
	words := reservedWords()
	for _, must := range []string{"h", "help", "claim", "token", "json", "version", "run", "dry-run"} {
		if !contains(words, must) {
			t.Errorf("reservedWords() lacks %q: %v", must, words)
		}
	}
	tree := filepath.Join(t.TempDir(), "tree")
	if code, _, stderr := runCLI("--dir", tree, "init"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	for _, w := range words {
		for _, err := range checkReservedID(inProcessRunner(tree), w) {
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
