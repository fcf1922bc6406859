package clitest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Issue 9, item 1: `h`, `help`, a command or a flag name are valid task
// ids and must be read as the id wherever an id goes, never as help or a
// subcommand. IDSteps is the one list of the commands that take an id;
// cmd/fencectl's test checks that it covers every command of the app.

// CLIRunner runs fencectl with args on a tree and returns its outcome.
type CLIRunner func(args ...string) (code int, stdout, stderr string)

// IDStep is one command given the word w as a task id; tok is the token of
// w's current claim (0 if none). Want is the exit code that shows w was
// read as an id (help would exit 0 with no JSON), and the JSON result (or
// error) must name task w.
type IDStep struct {
	Cmd  string
	Args func(w string, tok uint64) []string
	Want int
}

// IDSteps walk one task, named by a reserved word, through every command
// that takes an id, the refusals included.
func IDSteps() []IDStep {
	bad := func(tok uint64) string { return fmt.Sprint(tok + 1000003) } // never issued
	tk := func(tok uint64) string { return fmt.Sprint(tok) }
	return []IDStep{
		{"add", func(w string, _ uint64) []string { return []string{"add", "--id", w, "--json"} }, 0},
		{"show", func(w string, _ uint64) []string { return []string{"show", w, "--json"} }, 0},
		{"set", func(w string, _ uint64) []string { return []string{"set", w, "--priority", "2", "--json"} }, 0},
		{"log", func(w string, _ uint64) []string { return []string{"log", "--task", w, "--json"} }, 0},
		// list's cursor: the tasks after w, never w itself.
		{"list", func(w string, _ uint64) []string { return []string{"list", "--after", w, "--json"} }, 0},
		{"requeue", func(w string, _ uint64) []string { return []string{"requeue", w, "--json"} }, ExitNotAvailable},
		{"revoke", func(w string, _ uint64) []string { return []string{"revoke", w, "--json"} }, ExitNotAvailable},
		{"claim", func(w string, _ uint64) []string { return []string{"claim", w, "--json"} }, 0},
		{"verify", func(w string, tok uint64) []string { return []string{"verify", w, "--token", bad(tok), "--json"} }, ExitFenced},
		{"verify", func(w string, tok uint64) []string { return []string{"verify", w, "--token", tk(tok), "--json"} }, 0},
		{"heartbeat", func(w string, tok uint64) []string { return []string{"heartbeat", w, "--token", bad(tok), "--json"} }, ExitFenced},
		{"heartbeat", func(w string, tok uint64) []string { return []string{"heartbeat", w, "--token", tk(tok), "--json"} }, 0},
		{"put", func(w string, tok uint64) []string { return []string{"put", w, w, "--token", bad(tok), "--json"} }, ExitFenced},
		{"put", func(w string, tok uint64) []string { return []string{"put", w, w, "--token", tk(tok), "--json"} }, 0},
		{"complete", func(w string, tok uint64) []string { return []string{"complete", w, "--token", bad(tok), "--json"} }, ExitFenced},
		{"release", func(w string, tok uint64) []string { return []string{"release", w, "--token", bad(tok), "--json"} }, ExitFenced},
		{"fail", func(w string, tok uint64) []string { return []string{"fail", w, "--token", bad(tok), "--json"} }, ExitFenced},
		{"release", func(w string, tok uint64) []string { return []string{"release", w, "--token", tk(tok), "--json"} }, 0},
		{"claim", func(w string, _ uint64) []string { return []string{"claim", w, "--json"} }, 0},
		{"fail", func(w string, tok uint64) []string { return []string{"fail", w, "--token", tk(tok), "--json"} }, 0},
		{"claim", func(w string, _ uint64) []string { return []string{"claim", w, "--json"} }, 0},
		{"revoke", func(w string, _ uint64) []string { return []string{"revoke", w, "--json"} }, 0},
		{"claim", func(w string, _ uint64) []string { return []string{"claim", w, "--json"} }, 0},
		{"complete", func(w string, tok uint64) []string { return []string{"complete", w, "--token", tk(tok), "--json"} }, 0},
		{"cancel", func(w string, _ uint64) []string { return []string{"cancel", w, "--json"} }, ExitNotAvailable},
		{"requeue", func(w string, _ uint64) []string { return []string{"requeue", w, "--json"} }, 0},
		{"cancel", func(w string, _ uint64) []string { return []string{"cancel", w, "--json"} }, 0},
		{"cancel", func(w string, _ uint64) []string { return []string{"cancel", w, "--json"} }, 0},
		{"requeue", func(w string, _ uint64) []string { return []string{"requeue", w, "--json"} }, 0},
		{"run", func(w string, _ uint64) []string { return []string{"run", w, "--json", "--", "true"} }, 0},
		{"show", func(w string, _ uint64) []string { return []string{"show", w, "--json"} }, 0},
	}
}

// CheckReservedID runs every step for word w on tree and returns what went
// wrong (nil: w was read as an id everywhere). A step "misreads" when its
// exit code is not the one an id gives, or its JSON names another task.
func CheckReservedID(run CLIRunner, w string) []error {
	var errs []error
	var tok uint64
	for _, s := range IDSteps() {
		args := s.Args(w, tok)
		code, stdout, stderr := run(args...)
		if code != s.Want {
			errs = append(errs, fmt.Errorf("fencectl %s: exit %d, want %d (the word read as something else?)\nstdout: %.300s\nstderr: %.300s", strings.Join(args, " "), code, s.Want, stdout, stderr))
			continue
		}
		out := stdout
		if code != 0 {
			out = stderr
		}
		if s.Cmd == "run" { // run's result is its summary on stderr
			out = stderr
		}
		var res struct {
			Task  string `json:"task"`
			Token uint64 `json:"token"`
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if s.Cmd == "list" { // an array of the tasks after the cursor w
			var page []struct{ Task string }
			err := json.Unmarshal([]byte(lines[0]), &page)
			if err != nil || slices.ContainsFunc(page, func(p struct{ Task string }) bool { return p.Task == w }) {
				errs = append(errs, fmt.Errorf("fencectl %s: not a page after cursor %q (err %v)\nstdout: %.300s", strings.Join(args, " "), w, err, stdout))
			}
			continue
		}
		line := lines[len(lines)-1]
		if s.Cmd == "log" {
			line = lines[0]
		}
		if err := json.Unmarshal([]byte(line), &res); err != nil || res.Task != w {
			errs = append(errs, fmt.Errorf("fencectl %s: result does not name task %q (err %v)\nstdout: %.300s\nstderr: %.300s", strings.Join(args, " "), w, err, stdout, stderr))
			continue
		}
		if s.Cmd == "claim" {
			tok = res.Token
		}
	}
	return errs
}
