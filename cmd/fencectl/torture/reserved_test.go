package torture

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// TestTorture_ReservedIDs (torture suite): every word the CLI parser knows
// (command names, flag names, help, h, version…; see reservedWords) used
// as a task id with every command that takes one, through the real binary
// (see clitest.IDSteps): each must be read as the id, never as help or a
// subcommand. make test runs a few words; make torture all of them.
// cmd/fencectl's TestArgs_ReservedWordsAreIDs does the same in process,
// with the words taken from the app itself.
func TestTorture_ReservedIDs(t *testing.T) {
	words := reservedWords(t)
	if !tortureFull() {
		words = []string{"h", "help", "claim", "token", "version"}
	}
	tree := filepath.Join(t.TempDir(), "tree")
	// The steps fail a task and claim it again at once: no backoff here.
	if out, err := fencectlCmd(tree, "init", "--retry-backoff", "0s").CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	binary := func(args ...string) (int, string, string) {
		cmd := fencectlCmd(tree, args...)
		cmd.Env = append(cmd.Env, "FENCE_AGENT=reserved")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return clitest.ExitCode(err), stdout.String(), stderr.String()
	}
	start := time.Now()
	misread := map[string]bool{}
	for _, w := range words {
		for _, err := range clitest.CheckReservedID(binary, w) {
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
		"steps_per_word": len(clitest.IDSteps()),
		"invocations":    len(words) * len(clitest.IDSteps()),
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
