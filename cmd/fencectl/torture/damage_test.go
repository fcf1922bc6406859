package torture

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"golang.org/x/sys/unix"
)

// TestTorture_JournalDamage damages the journal in every way we know —
// truncated, garbage in a page, zeroed pages, zero length, a directory, a
// FIFO, a symlink, gone — and checks that every command exits 1 with a
// message naming the file and the next step (never a panic or a stack
// trace), and that `recover` then brings every task back in the state its
// directory says.
func TestTorture_JournalDamage(t *testing.T) {
	tasks := tortureScale(20, 500)
	// partial damage (garbage in some pages) may spare what a command
	// reads: such a command may succeed, but replay --check, which reads
	// everything, must not, and nothing may panic.
	damages := []struct {
		name    string
		do      func(t *testing.T, path string)
		partial bool
	}{
		{"truncated-to-100-bytes", func(t *testing.T, p string) { must(t, os.Truncate(p, 100)) }, false},
		{"truncated-to-half", func(t *testing.T, p string) {
			fi, err := os.Stat(p)
			must(t, err)
			must(t, os.Truncate(p, fi.Size()/2))
		}, false},
		{"garbage-in-pages", func(t *testing.T, p string) { scribble(t, p, 2*4096, 8*4096, 0x5a) }, true},
		{"zeroed-meta-pages", func(t *testing.T, p string) { scribble(t, p, 0, 2*4096, 0) }, false},
		{"zero-length", func(t *testing.T, p string) { must(t, os.Truncate(p, 0)) }, false},
		{"directory", func(t *testing.T, p string) { must(t, os.Remove(p)); must(t, os.Mkdir(p, 0o700)) }, false},
		{"fifo", func(t *testing.T, p string) { must(t, os.Remove(p)); must(t, unix.Mkfifo(p, 0o600)) }, false},
		{"symlink", func(t *testing.T, p string) {
			outside := filepath.Join(t.TempDir(), "elsewhere.db")
			must(t, os.Rename(p, outside))
			must(t, os.Symlink(outside, p))
		}, false},
		{"deleted", func(t *testing.T, p string) { must(t, os.Remove(p)) }, false},
	}
	commands := [][]string{{"status"}, {"claim"}, {"add", "--id", "new"}, {"replay", "--check"}, {"log"}, {"reap"}}
	refusals, recovered := 0, 0
	for _, dm := range damages {
		t.Run(dm.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "tree")
			if out, err := fencectlCmd(dir, "init").CombinedOutput(); err != nil {
				t.Fatalf("init: %v\n%s", err, out)
			}
			for i := 0; i < tasks; i++ {
				must(t, os.WriteFile(filepath.Join(dir, "inbox", fmt.Sprintf("t%04d", i)), []byte("x"), 0o644))
			}
			fencectlCmd(dir, "reap").Run()
			fencectlCmd(dir, "claim", "t0000").Run()
			journal := filepath.Join(dir, ".fence", "journal.db")
			extra := 0
			dm.do(t, journal)
			for _, args := range commands {
				out, err := fencectlCmd(dir, args...).CombinedOutput()
				text := string(out)
				code := clitest.ExitCode(err)
				if strings.Contains(text, "goroutine ") || strings.Contains(text, "panic:") {
					t.Errorf("%v: a stack trace reached the user:\n%s", args, text)
				}
				fullRead := args[0] == "replay"
				if dm.partial && !fullRead && code == 0 {
					if args[0] == "add" {
						extra++ // the damage spared what add writes
					}
					continue // the damage spared what this command reads
				}
				if code != clitest.ExitError {
					t.Errorf("%v on a %s journal: exit %d, want 1\n%s", args, dm.name, code, text)
				}
				if !strings.Contains(text, "journal.db") || !strings.Contains(text, "recover") {
					t.Errorf("%v: the message does not name the file and `fencectl recover`:\n%s", args, text)
				}
				refusals++
			}
			out, err := fencectlCmd(dir, "recover").CombinedOutput()
			if err != nil {
				t.Fatalf("recover after %s: %v\n%s", dm.name, err, out)
			}
			if out, err := fencectlCmd(dir, "replay", "--check").CombinedOutput(); err != nil {
				t.Fatalf("replay --check after recover: %v\n%s", err, out)
			}
			entries, err := os.ReadDir(filepath.Join(dir, "available"))
			must(t, err)
			if len(entries) != tasks+extra {
				t.Errorf("after recover %d tasks are available, want all %d (the claimed one freed)", len(entries), tasks+extra)
			}
			recovered++
		})
	}
	tortureReport(t, "journal damage", map[string]any{
		"damages": len(damages), "refused_with_exit_1": refusals, "recovered": recovered, "tasks_per_tree": tasks,
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// scribble overwrites [from, to) of path with b.
func scribble(t *testing.T, path string, from, to int, b byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	must(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte(strings.Repeat(string(rune(b)), to-from)), int64(from))
	must(t, err)
}
