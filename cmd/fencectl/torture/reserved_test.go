package torture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestTorture_ReservedIDs (torture suite): every word the CLI parser knows
// (command names, flag names, help, h, version…; see reservedWords) used
// as a task id with every command that takes one, through the real binary
// (see idSteps): each must be read as the id, never as help or a
// subcommand. make test runs a few words; make torture all of them.
// cmd/fencectl's TestArgs_ReservedWordsAreIDs does the same in process,
// with the words taken from the app itself.
func TestTorture_ReservedIDs(t *testing.T) {
	words := reservedWords(t)
	if !tortureFull() {
		words = []string{"h", "help", "claim", "token", "version"}
	}
	tree := filepath.Join(t.TempDir(), "tree")
	if out, err := fencectlCmd(tree, "init").CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	binary := func(args ...string) (int, string, string) {
		cmd := fencectlCmd(tree, args...)
		cmd.Env = append(cmd.Env, "FENCE_AGENT=reserved")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return exitCode(err), stdout.String(), stderr.String()
	}
	start := time.Now()
	misread := map[string]bool{}
	for _, w := range words {
		for _, err := range checkReservedID(binary, w) {
			misread[w] = true
			t.Errorf("id %q: %v", w, err)
		}
	}
	var bad []string
	for w := range misread {
		bad = append(bad, w)
	}
	metrics := map[string]any{
		"words":          len(words),
		"steps_per_word": len(idSteps()),
		"invocations":    len(words) * len(idSteps()),
		"misread_ids":    len(bad),
		"seconds":        time.Since(start).Seconds(),
	}
	if len(bad) > 0 {
		metrics["misread"] = strings.Join(bad, ",")
	}
	tortureReport(t, "reserved ids", metrics)
}

// reservedWords is every word the binary's help names (commands and their
// aliases, global and command flags) that is also a valid task id, and the
// words urfave/cli knows without listing them, sorted: what cmd/fencectl's
// reservedWords takes from the app, read from outside.
func reservedWords(t *testing.T) []string {
	t.Helper()
	validID := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	seen := map[string]bool{}
	for _, w := range []string{"help", "h", "version", "v", "generate-bash-completion", "init-completion", "completion"} {
		seen[w] = true
	}
	// names returns the names a help line lists before its description
	// ("help, h    list…", "--dir DIR    root…", "--help, -h   show…").
	names := func(line string) []string {
		head, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		var ns []string
		for _, n := range strings.Split(head, ", ") {
			ns = append(ns, strings.TrimLeft(strings.Fields(n)[0], "-"))
		}
		return ns
	}
	help := func(args ...string) string {
		out, err := exec.Command(fencectlBin, append(args, "--help")...).Output()
		if err != nil {
			t.Fatalf("fencectl %s --help: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	var commands []string
	for _, l := range helpSection(help(), "COMMANDS:") {
		ns := names(l)
		commands = append(commands, ns[0])
		for _, n := range ns {
			seen[n] = true
		}
	}
	if len(commands) == 0 {
		t.Fatal("fencectl --help lists no commands: the test's idea of the help is out of date")
	}
	for _, args := range append([][]string{nil}, func() (cs [][]string) {
		for _, c := range commands {
			if c != "help" {
				cs = append(cs, []string{c})
			}
		}
		return cs
	}()...) {
		for _, l := range helpSection(help(args...), "OPTIONS:") {
			if strings.HasPrefix(strings.TrimSpace(l), "-") {
				for _, n := range names(l) {
					seen[n] = true
				}
			}
		}
	}
	var words []string
	for w := range seen {
		if validID.MatchString(w) {
			words = append(words, w)
		}
	}
	sort.Strings(words)
	return words
}

// helpSection returns the lines of the help sections whose heading ends
// with heading ("COMMANDS:", "OPTIONS:" matches "GLOBAL OPTIONS:" too).
func helpSection(help, heading string) []string {
	var lines []string
	in := false
	for _, l := range strings.Split(help, "\n") {
		switch {
		case l != "" && l[0] != ' ':
			in = strings.HasSuffix(l, heading)
		case in && strings.TrimSpace(l) != "":
			lines = append(lines, l)
		}
	}
	return lines
}

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
