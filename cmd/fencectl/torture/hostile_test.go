package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"golang.org/x/sys/unix"
)

// TestTorture_Hostile (torture suite, part 8): hostile trees and inputs.
// Ids with "../", absolute paths, NUL, control characters, 10 KB names and
// look-alike letters; symlinks planted in available/, claimed/, out/ and
// .fence/ pointing outside the tree; a FIFO and a directory in available/;
// a huge task file; a world-writable tree; control characters in agent
// names. Every case must be refused or reported with a clear message, no
// command may hang (each runs the real binary under a deadline), and
// nothing outside the tree may be read or written: a directory of
// sentinel files next to the trees is snapshotted (content, size, mode,
// mtime) before every case and compared after it.
//
// The huge file is 50 MB here and 1 GB under FENCE_TORTURE=full.
func TestTorture_Hostile(t *testing.T) {
	h := newHostile(t)
	for _, c := range hostileCases() {
		h.runCase(c)
	}
	refused := 0
	var failedCases []string
	for _, r := range h.results {
		if r.ok {
			refused++
		} else {
			failedCases = append(failedCases, r.name)
		}
	}
	metrics := map[string]any{
		"cases":               len(h.results),
		"refused_or_reported": refused,
		"outside_writes":      h.outsideWrites,
		"hangs":               h.hangs,
		"panics":              h.panics,
		"big_file_bytes":      h.bigBytes,
		"big_add_seconds":     h.bigSeconds,
		"big_add_max_rss_kb":  h.bigRSS,
		"big_staged_disk_kb":  h.bigDiskKB,
	}
	if len(failedCases) > 0 {
		metrics["failed_cases"] = strings.Join(failedCases, ",")
	}
	tortureReport(t, "hostile", metrics)
}

// hostileCase is one hostile situation: fn sets it up in a fresh tree,
// runs commands and returns nil if every command refused or reported it
// clearly (t.Errorf-style failures go through the returned error).
type hostileCase struct {
	name string
	fn   func(h *hostile, tree string) error
}

type hostileResult struct {
	name string
	ok   bool
}

// hostile is the state shared by the cases: the sentinel directory
// outside every tree, and the counters of the report.
type hostile struct {
	t       *testing.T
	base    string
	outside string // sentinel files nothing may touch
	secret  string // outside/secret.txt
	journal string // outside/journal-copy.db: a valid journal, outside
	before  string // snapshot of outside

	results       []hostileResult
	hangs         int
	panics        int
	outsideWrites int
	bigBytes      int64
	bigSeconds    float64
	bigRSS        int64
	bigDiskKB     int64
}

func newHostile(t *testing.T) *hostile {
	base := t.TempDir()
	h := &hostile{t: t, base: base, outside: filepath.Join(base, "outside")}
	h.secret = filepath.Join(h.outside, "secret.txt")
	h.journal = filepath.Join(h.outside, "journal-copy.db")
	for _, d := range []string{h.outside, filepath.Join(h.outside, "dir"), filepath.Join(h.outside, "fence-copy", "tmp"), filepath.Join(h.outside, "fence-copy", "quarantine")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(h.secret, []byte("precious file outside the tree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A real journal outside the tree, for the symlinked journal.db and
	// .fence cases.
	src := filepath.Join(base, "journal-src")
	if out, err := fencectlCmd(src, "init").CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	for _, dst := range []string{h.journal, filepath.Join(h.outside, "fence-copy", "journal.db")} {
		b, err := os.ReadFile(filepath.Join(src, ".fence", "journal.db"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(h.outside, "fence-copy", "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Give the sentinels an old mtime, so that any write shows.
	old := time.Now().Add(-24 * time.Hour)
	filepath.WalkDir(h.outside, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	h.before = hstSnapshot(t, h.outside)
	return h
}

// runCase runs one case in a fresh tree and records its outcome.
func (h *hostile) runCase(c hostileCase) {
	parent := h.t
	defer func() { h.t = parent }()
	parent.Run(c.name, func(t *testing.T) {
		h.t = t
		tree := filepath.Join(h.base, "trees", c.name, "tree")
		if out, err := fencectlCmd(tree, "init").CombinedOutput(); err != nil {
			t.Fatalf("init: %v\n%s", err, out)
		}
		hangsBefore, panicsBefore := h.hangs, h.panics
		err := c.fn(h, tree)
		ok := err == nil
		if err != nil {
			t.Error(err)
		}
		if h.hangs > hangsBefore {
			ok = false
			t.Errorf("%d command(s) hung", h.hangs-hangsBefore)
		}
		if h.panics > panicsBefore {
			ok = false
			t.Errorf("%d command(s) showed a Go panic", h.panics-panicsBefore)
		}
		if after := hstSnapshot(t, h.outside); after != h.before {
			ok = false
			h.outsideWrites++
			t.Errorf("something outside the tree changed:\nbefore:\n%s\nafter:\n%s", h.before, after)
			h.before = after // report each case's own writes
		}
		h.results = append(h.results, hostileResult{c.name, ok})
	})
}

// hstResult is the outcome of one fencectl process.
type hstResult struct {
	code           int
	stdout, stderr string
	hung           bool
	maxRSSKB       int64
	elapsed        time.Duration
}

func (r hstResult) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, hstClip(r.stdout), hstClip(r.stderr))
}

func hstClip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

// hostileTimeout bounds every command: none may hang.
const hostileTimeout = 30 * time.Second

// run runs the real binary on tree with
// a deadline; a command still running at the deadline is killed and
// counted as a hang.
func (h *hostile) run(tree string, stdin io.Reader, args ...string) hstResult {
	return h.runFor(hostileTimeout, tree, stdin, args...)
}

func (h *hostile) runFor(limit time.Duration, tree string, stdin io.Reader, args ...string) hstResult {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, fencectlBin, args...)
	cmd.Env = append(os.Environ(), "FENCE_DIR="+tree, "FENCE_TIMEOUT=10s", "FENCE_AGENT=hostile")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, stdin
	start := time.Now()
	err := cmd.Run()
	r := hstResult{code: clitest.ExitCode(err), stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		r.hung = true
		h.hangs++
		h.t.Errorf("fencectl %q hung (killed after %s)", args, limit)
	}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.maxRSSKB = ru.Maxrss
		}
	}
	if strings.Contains(r.stderr, "internal error") || strings.Contains(r.stderr, "goroutine ") {
		h.panics++
		h.t.Errorf("fencectl %q: a panic reached the user:\n%s", args, r.stderr)
	}
	return r
}

// refused checks that r is a refusal: exit code want (or any non-zero
// code if want < 0) and a message matching each of msgs.
func refused(what string, r hstResult, want int, msgs ...string) error {
	if r.code == 0 || (want >= 0 && r.code != want) {
		return fmt.Errorf("%s: want a refusal (exit %d), got %s", what, want, r)
	}
	for _, m := range msgs {
		if !regexp.MustCompile(m).MatchString(r.stderr) {
			return fmt.Errorf("%s: message does not match %q: %s", what, m, r)
		}
	}
	return nil
}

// hstControl finds a raw control character (other than newline and tab)
// in s: output that carries one lets a hostile name drive the terminal
// of whoever reads it (clear the screen, set the title, write the
// clipboard with OSC 52, forge lines).
func hstControl(s string) (int, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			return i, true
		}
	}
	return 0, false
}

func noControl(what, s string) error {
	if i, bad := hstControl(s); bad {
		lo, hi := max(0, i-40), min(len(s), i+40)
		return fmt.Errorf("%s: raw control character %#02x in the output: %q", what, s[i], s[lo:hi])
	}
	return nil
}

// claimToken claims id and returns its token.
func (h *hostile) claimToken(tree, id string) (uint64, error) {
	r := h.run(tree, nil, "claim", id, "--json")
	if r.code != 0 {
		return 0, fmt.Errorf("claim %s: %s", id, r)
	}
	var c struct{ Token uint64 }
	if err := json.Unmarshal([]byte(r.stdout), &c); err != nil {
		return 0, fmt.Errorf("claim %s output: %v", id, err)
	}
	return c.Token, nil
}

func (h *hostile) mustRun(tree string, args ...string) error {
	if r := h.run(tree, nil, args...); r.code != 0 {
		return fmt.Errorf("%q: %s", args, r)
	}
	return nil
}

// treeFiles lists the tree's entries (paths relative to it), to show that
// a refused command created nothing.
func treeFiles(t *testing.T, tree string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			rel, _ := filepath.Rel(tree, p)
			if rel != ".fence/journal.db" && rel != ".fence/lock" {
				out = append(out, rel)
			}
		}
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func hostileCases() []hostileCase {
	return []hostileCase{
		{"id_dotdot", func(h *hostile, tree string) error {
			before := treeFiles(h.t, tree)
			for _, args := range [][]string{
				{"add", "--id", "../escape"}, {"add", "--id", "../../outside/secret.txt"}, {"claim", "../x"},
				{"show", "../x"}, {"complete", "../x", "--token", "5"}, {"log", "--task", "../x"},
				{"revoke", ".."}, {"requeue", "."}, {"put", "t1", "../../outside/x", "--token", "5"},
			} {
				if err := refused(fmt.Sprint(args), h.run(tree, strings.NewReader("x"), args...), clitest.ExitUsage, `\[A-Za-z0-9\]\[A-Za-z0-9._-\]\{0,127\}`); err != nil {
					return err
				}
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(tree), "escape")); err == nil {
				return errors.New("../escape was created next to the tree")
			}
			if after := treeFiles(h.t, tree); after != before {
				return fmt.Errorf("refused commands changed the tree:\n%s\nvs\n%s", before, after)
			}
			return nil
		}},
		{"id_absolute_path", func(h *hostile, tree string) error {
			for _, args := range [][]string{
				{"add", "--id", h.secret}, {"claim", h.secret}, {"show", h.secret},
				{"heartbeat", h.secret, "--token", "5"}, {"put", "t1", h.secret, "--token", "5"},
			} {
				if err := refused(fmt.Sprint(args), h.run(tree, strings.NewReader("overwrite"), args...), clitest.ExitUsage, `not a path|must match`); err != nil {
					return err
				}
			}
			return nil
		}},
		{"id_nul", func(h *hostile, tree string) error {
			// No process can receive a NUL in argv: the kernel takes
			// C strings, and Go refuses to start the process.
			cmd := exec.Command(fencectlBin, "add", "--id", "a\x00b")
			cmd.Env = append(os.Environ(), "FENCE_DIR="+tree)
			if err := cmd.Run(); err == nil || !errors.Is(err, syscall.EINVAL) && !strings.Contains(err.Error(), "invalid argument") {
				return fmt.Errorf("exec with a NUL argument: %v, want EINVAL", err)
			}
			// Past the kernel, in process, every command refuses it:
			// cmd/fencectl's TestArgs_NULIsRefused.
			return nil
		}},
		{"id_control_chars", func(h *hostile, tree string) error {
			for _, id := range []string{"a\x1b[2Jb", "a\nb", "a\tb", "a\rb", "x\x07", "a\x7f", "\x1b]52;c;aGk=\x07"} {
				for _, args := range [][]string{{"add", "--id", id}, {"claim", id}, {"show", id}, {"--json", "show", id}} {
					r := h.run(tree, nil, args...)
					if err := refused(fmt.Sprintf("%q", args), r, clitest.ExitUsage, `must match|starts with`); err != nil {
						return err
					}
					if err := noControl(fmt.Sprintf("%q", args), r.stderr); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{"id_10KB", func(h *hostile, tree string) error {
			huge := strings.Repeat("a", 10*1024)
			for _, args := range [][]string{{"add", "--id", huge}, {"claim", huge}, {"--json", "show", huge}, {"put", "t1", huge, "--token", "1"}} {
				r := h.run(tree, nil, args...)
				if err := refused(args[0], r, clitest.ExitUsage); err != nil {
					return err
				}
				if len(r.stderr) > 1024 {
					return fmt.Errorf("%s with a 10 KB id: %d bytes of message, want it cut short", args[0], len(r.stderr))
				}
			}
			r := h.run(tree, nil, "add", "--id", huge)
			return refused("add", r, clitest.ExitUsage, `10240 bytes`)
		}},
		{"id_unicode_lookalikes", func(h *hostile, tree string) error {
			if err := h.mustRun(tree, "add", "--id", "task"); err != nil {
				return err
			}
			for _, id := range []string{"t\u0430sk", "ｔａｓｋ", "task\u200b", "tas\u212a", "\u202eksat", "ta\u0455k", "tas\u0301k"} {
				for _, args := range [][]string{{"add", "--id", id}, {"claim", id}, {"show", id}} {
					r := h.run(tree, nil, args...)
					if err := refused(fmt.Sprintf("%q", args), r, clitest.ExitUsage, `U\+[0-9A-F]{4}, not ASCII`); err != nil {
						return err
					}
				}
			}
			// The look-alike never reached the real task.
			r := h.run(tree, nil, "show", "task", "--json")
			if !strings.Contains(r.stdout, `"state":"available"`) {
				return fmt.Errorf("task changed: %s", r)
			}
			return nil
		}},
		{"inbox_hostile_names", func(h *hostile, tree string) error {
			inbox := filepath.Join(tree, "inbox")
			names := []string{"t\u0430sk", "bad\x1b[31mred", "line\nbreak", "-rf", strings.Repeat("n", 255), "tab\there", "ok1"}
			for _, n := range names {
				if err := os.WriteFile(filepath.Join(inbox, n), []byte("x"), 0o644); err != nil {
					return err
				}
			}
			r := h.run(tree, nil, "reap")
			if r.code != 0 {
				return fmt.Errorf("reap: %s", r)
			}
			if !strings.Contains(r.stderr, "adopted ok1") {
				return fmt.Errorf("ok1 not adopted: %s", r)
			}
			for _, want := range []string{`U\+0430`, `starts with '-'`, `is 255 bytes long`} {
				if !regexp.MustCompile(want).MatchString(r.stderr) {
					return fmt.Errorf("rejection %q not reported: %s", want, r)
				}
			}
			for _, n := range names[:6] {
				if _, err := os.Lstat(filepath.Join(inbox, n)); err != nil {
					return fmt.Errorf("rejected %q not left in inbox/: %v", n, err)
				}
			}
			// The reports name the files; the names must not reach the
			// terminal raw: not in the notices, not in replay's findings
			// (for an entry in a state directory).
			if err := os.WriteFile(filepath.Join(tree, "available", "odd\x1b[31m"), []byte("x"), 0o644); err != nil {
				return err
			}
			rc := h.run(tree, nil, "replay", "--check")
			if rc.code != clitest.ExitDrift || !strings.Contains(rc.stdout, "invalid_entry") {
				return fmt.Errorf("replay --check does not report the odd entry: %s", rc)
			}
			return errors.Join(noControl("reap notices (text)", r.stderr), noControl("replay --check", rc.stdout+rc.stderr))
		}},
		{"symlink_available", func(h *hostile, tree string) error {
			if err := h.mustRun(tree, "add", "--id", "t1"); err != nil {
				return err
			}
			p := filepath.Join(tree, "available", "t1")
			os.Remove(p)
			if err := os.Symlink(h.secret, p); err != nil {
				return err
			}
			if err := refused("claim t1", h.run(tree, nil, "claim", "t1"), -1, `symlink`); err != nil {
				return err
			}
			r := h.run(tree, nil, "claim")
			if err := refused("claim (next)", r, clitest.ExitNotAvailable, `t1.*symlink`); err != nil {
				return err
			}
			if err := refused("replay --check", h.run(tree, nil, "replay", "--check"), clitest.ExitDrift); err != nil {
				return err
			}
			if err := refused("replay", h.run(tree, nil, "replay"), clitest.ExitDrift, ``); err != nil {
				return err
			}
			if fi, err := os.Lstat(p); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				return fmt.Errorf("the symlink was not left in place: %v", err)
			}
			return nil
		}},
		{"symlink_claimed", func(h *hostile, tree string) error {
			if err := h.mustRun(tree, "add", "--id", "t1"); err != nil {
				return err
			}
			tok, err := h.claimToken(tree, "t1")
			if err != nil {
				return err
			}
			p := filepath.Join(tree, "claimed", "t1")
			os.Remove(p)
			if err := os.Symlink(h.secret, p); err != nil {
				return err
			}
			for _, op := range []string{"complete", "release", "fail"} {
				r := h.run(tree, nil, op, "t1", "--token", fmt.Sprint(tok))
				if err := refused(op, r, -1, `claimed/t1 is a symlink`); err != nil {
					return err
				}
			}
			r := h.run(tree, nil, "show", "t1", "--json")
			if !strings.Contains(r.stdout, `"state":"claimed"`) {
				return fmt.Errorf("refused mutations changed the task: %s", r)
			}
			return refused("replay --check", h.run(tree, nil, "replay", "--check"), clitest.ExitDrift)
		}},
		{"symlink_fence_tmp", func(h *hostile, tree string) error {
			p := filepath.Join(tree, ".fence", "tmp")
			if err := os.Remove(p); err != nil {
				return err
			}
			if err := os.Symlink(filepath.Join(h.outside, "dir"), p); err != nil {
				return err
			}
			for _, args := range [][]string{{"add", "--id", "t1"}, {"status"}, {"claim"}, {"replay"}, {"init"}} {
				if err := refused(fmt.Sprint(args), h.run(tree, strings.NewReader("x"), args...), clitest.ExitError, `\.fence/tmp is a symlink`); err != nil {
					return err
				}
			}
			return nil
		}},
		{"symlink_fence_quarantine", func(h *hostile, tree string) error {
			p := filepath.Join(tree, ".fence", "quarantine")
			os.Remove(p)
			if err := os.Symlink(filepath.Join(h.outside, "dir"), p); err != nil {
				return err
			}
			return refused("replay", h.run(tree, nil, "replay"), clitest.ExitError, `\.fence/quarantine is a symlink`)
		}},
		{"symlink_journal", func(h *hostile, tree string) error {
			p := filepath.Join(tree, ".fence", "journal.db")
			os.Remove(p)
			if err := os.Symlink(h.journal, p); err != nil {
				return err
			}
			for _, args := range [][]string{{"status"}, {"add", "--id", "t1"}, {"claim"}, {"replay"}, {"replay", "--check"}, {"log"}, {"init"}} {
				if err := refused(fmt.Sprint(args), h.run(tree, nil, args...), clitest.ExitError, `journal\.db.*symlink`); err != nil {
					return err
				}
			}
			return nil
		}},
		{"symlink_lock", func(h *hostile, tree string) error {
			p := filepath.Join(tree, ".fence", "lock")
			os.Remove(p)
			// To an existing file, then dangling (O_CREAT must not make
			// a file outside).
			for _, target := range []string{h.secret, filepath.Join(h.outside, "new-lock")} {
				os.Remove(p)
				if err := os.Symlink(target, p); err != nil {
					return err
				}
				for _, args := range [][]string{{"status"}, {"add", "--id", "t1"}, {"claim"}} {
					if err := refused(fmt.Sprint(args), h.run(tree, nil, args...), clitest.ExitError, `\.fence/lock`, `symlink|symbolic link`); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{"symlink_fence_dir", func(h *hostile, tree string) error {
			p := filepath.Join(tree, ".fence")
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			if err := os.Symlink(filepath.Join(h.outside, "fence-copy"), p); err != nil {
				return err
			}
			for _, args := range [][]string{{"status"}, {"add", "--id", "t1"}, {"init"}, {"replay"}} {
				if err := refused(fmt.Sprint(args), h.run(tree, nil, args...), clitest.ExitError, `\.fence is a symlink`); err != nil {
					return err
				}
			}
			return nil
		}},
		{"symlink_state_dir", func(h *hostile, tree string) error {
			for _, d := range []string{"done", "inbox", "available"} {
				p := filepath.Join(tree, d)
				real := p + ".real"
				if err := os.Rename(p, real); err != nil {
					return err
				}
				if err := os.Symlink(filepath.Join(h.outside, "dir"), p); err != nil {
					return err
				}
				for _, args := range [][]string{{"status"}, {"add", "--id", "t1"}, {"claim"}} {
					if err := refused(d+fmt.Sprint(args), h.run(tree, nil, args...), clitest.ExitError, d+` is a symlink`); err != nil {
						return err
					}
				}
				os.Remove(p)
				if err := os.Rename(real, p); err != nil {
					return err
				}
			}
			return nil
		}},
		{"symlink_out", func(h *hostile, tree string) error {
			if err := h.mustRun(tree, "add", "--id", "t1"); err != nil {
				return err
			}
			tok, err := h.claimToken(tree, "t1")
			if err != nil {
				return err
			}
			// out/t1 itself a symlink to a directory outside.
			if err := os.Symlink(filepath.Join(h.outside, "dir"), filepath.Join(tree, "out", "t1")); err != nil {
				return err
			}
			r := h.run(tree, strings.NewReader("payload"), "put", "t1", "result", "-", "--token", fmt.Sprint(tok))
			if err := refused("put via symlinked out/t1", r, -1, `out/t1 is a symlink`); err != nil {
				return err
			}
			// out/t1/result a symlink to a file outside: replaced, not
			// followed.
			os.Remove(filepath.Join(tree, "out", "t1"))
			os.Mkdir(filepath.Join(tree, "out", "t1"), 0o755)
			res := filepath.Join(tree, "out", "t1", "result")
			if err := os.Symlink(h.secret, res); err != nil {
				return err
			}
			r = h.run(tree, strings.NewReader("payload"), "put", "t1", "result", "-", "--token", fmt.Sprint(tok))
			if r.code != 0 {
				return fmt.Errorf("put over a symlink: %s", r)
			}
			if fi, err := os.Lstat(res); err != nil || !fi.Mode().IsRegular() {
				return fmt.Errorf("out/t1/result is not a regular file after put: %v", err)
			}
			return nil
		}},
		{"out_entry_blocks_only_its_put", func(h *hostile, tree string) error {
			// An odd entry in out/<task> must fail that put alone: an
			// entry anyone can plant in out/ must not wedge other writers.
			for _, id := range []string{"t1", "t2", "t3"} {
				if err := h.mustRun(tree, "add", "--id", id); err != nil {
					return err
				}
			}
			tok, err := h.claimToken(tree, "t1")
			if err != nil {
				return err
			}
			if err := os.Symlink(filepath.Join(h.outside, "dir"), filepath.Join(tree, "out", "t1")); err != nil {
				return err
			}
			r := h.run(tree, strings.NewReader("payload"), "put", "t1", "result", "-", "--token", fmt.Sprint(tok))
			if err := refused("put via symlinked out/t1", r, -1, `out/t1 is a symlink`); err != nil {
				return err
			}
			var errs []error
			for _, args := range [][]string{{"add", "--id", "t4"}, {"claim", "t2"}, {"reap"}} {
				if r := h.run(tree, nil, args...); r.code != 0 {
					errs = append(errs, fmt.Errorf("%v after a put refused on out/t1 (a symlink): %s", args, r))
				}
			}
			return errors.Join(errs...)
		}},
		{"fifo_and_dir_in_available", func(h *hostile, tree string) error {
			av := filepath.Join(tree, "available")
			if err := unix.Mkfifo(filepath.Join(av, "fifo1"), 0o644); err != nil {
				return err
			}
			if err := os.Mkdir(filepath.Join(av, "dir1"), 0o755); err != nil {
				return err
			}
			os.WriteFile(filepath.Join(av, "dir1", "inner"), []byte("x"), 0o644)
			if err := refused("claim (next)", h.run(tree, nil, "claim"), clitest.ExitNotAvailable); err != nil {
				return err
			}
			for _, id := range []string{"fifo1", "dir1"} {
				if err := refused("claim "+id, h.run(tree, nil, "claim", id), clitest.ExitNoSuchTask); err != nil {
					return err
				}
			}
			if err := refused("replay --check", h.run(tree, nil, "replay", "--check"), clitest.ExitDrift); err != nil {
				return err
			}
			r := h.run(tree, nil, "replay", "--check")
			for _, want := range []string{"fifo1 (available/): fifo", "dir1 (available/): directory"} {
				if !strings.Contains(r.stdout, want) {
					return fmt.Errorf("replay --check does not report %q: %s", want, r)
				}
			}
			if err := refused("replay", h.run(tree, nil, "replay"), clitest.ExitDrift); err != nil {
				return err
			}
			if fi, err := os.Lstat(filepath.Join(av, "fifo1")); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
				return fmt.Errorf("fifo1 not left in place: %v", err)
			}
			if _, err := os.Stat(filepath.Join(av, "dir1", "inner")); err != nil {
				return fmt.Errorf("dir1 not left in place: %v", err)
			}
			// A real task next to them is still claimed.
			if err := h.mustRun(tree, "add", "--id", "t1"); err != nil {
				return err
			}
			return h.mustRun(tree, "claim")
		}},
		{"fifo_as_task_file", func(h *hostile, tree string) error {
			if err := h.mustRun(tree, "add", "--id", "t1"); err != nil {
				return err
			}
			p := filepath.Join(tree, "available", "t1")
			os.Remove(p)
			if err := unix.Mkfifo(p, 0o644); err != nil {
				return err
			}
			if err := refused("claim t1", h.run(tree, nil, "claim", "t1"), -1, `fifo`); err != nil {
				return err
			}
			if err := refused("claim (next)", h.run(tree, nil, "claim"), clitest.ExitNotAvailable, `t1.*fifo`); err != nil {
				return err
			}
			if r := h.run(tree, nil, "show", "t1"); r.code != 0 {
				return fmt.Errorf("show: %s", r)
			}
			return refused("replay --check", h.run(tree, nil, "replay", "--check"), clitest.ExitDrift)
		}},
		{"fifo_as_journal_or_root", func(h *hostile, tree string) error {
			p := filepath.Join(tree, ".fence", "journal.db")
			os.Remove(p)
			if err := unix.Mkfifo(p, 0o644); err != nil {
				return err
			}
			for _, args := range [][]string{{"status"}, {"add", "--id", "t1"}, {"init"}} {
				if err := refused(fmt.Sprint(args), h.run(tree, nil, args...), clitest.ExitError, `not a regular file`); err != nil {
					return err
				}
			}
			fifo := filepath.Join(filepath.Dir(tree), "fifo-root")
			if err := unix.Mkfifo(fifo, 0o644); err != nil {
				return err
			}
			// A --dir that is not a directory is bad input (issue 9, item 18).
			for _, args := range [][]string{{"status"}, {"init"}, {"claim"}} {
				if err := refused(fmt.Sprint(args), h.run(fifo, nil, args...), clitest.ExitUsage, `not a directory`); err != nil {
					return err
				}
			}
			return nil
		}},
		{"big_task_file", func(h *hostile, tree string) error {
			size := int64(50 << 20)
			if tortureFull() {
				size = 1 << 30
			}
			big := filepath.Join(filepath.Dir(tree), "big.bin")
			if err := os.WriteFile(big, nil, 0o644); err != nil {
				return err
			}
			if err := os.Truncate(big, size); err != nil { // sparse, like truncate -s
				return err
			}
			r := h.runFor(5*time.Minute, tree, nil, "add", "--id", "big1", big)
			h.bigBytes, h.bigSeconds, h.bigRSS = size, r.elapsed.Seconds(), r.maxRSSKB
			h.t.Logf("add of a %d-byte sparse file: exit %d in %s, max RSS %d KB", size, r.code, r.elapsed.Round(time.Millisecond), r.maxRSSKB)
			if r.code != 0 {
				// A refusal is fine if it says why.
				return refused("add big", r, -1, `(?i)large|limit|size`)
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(tree, "available", "big1"), &st); err != nil {
				return fmt.Errorf("big1 not in available/: %v", err)
			}
			h.bigDiskKB = st.Blocks * 512 / 1024
			h.t.Logf("staged copy: %d bytes, %d KB on disk (the source used %d KB)", st.Size, h.bigDiskKB, hstDiskKB(big))
			if st.Size != size {
				return fmt.Errorf("big1 is %d bytes, want %d", st.Size, size)
			}
			// A race-built fencectl (make test-race) keeps shadow memory
			// for what it touches, several times its own: 264 MB for this
			// add that streams. The bound is for fencectl's memory.
			limitKB := int64(200 * 1024)
			if raceBuild() {
				limitKB *= 5
			}
			if r.maxRSSKB > limitKB {
				return fmt.Errorf("add of a %d-byte file used %d KB of memory: it must stream", size, r.maxRSSKB)
			}
			if n := hstDirLen(filepath.Join(tree, ".fence", "tmp")); n != 0 {
				return fmt.Errorf(".fence/tmp holds %d files after add", n)
			}
			// The same size through the inbox: a rename, no copy.
			if err := os.Rename(big, filepath.Join(tree, "inbox", "big2")); err != nil {
				return err
			}
			r = h.run(tree, nil, "reap")
			if r.code != 0 || !strings.Contains(r.stderr, "adopted big2") {
				return fmt.Errorf("adopt big2: %s", r)
			}
			// Claiming and completing a big task moves it, never copies it.
			tok, err := h.claimToken(tree, "big1")
			if err != nil {
				return err
			}
			return h.mustRun(tree, "complete", "big1", "--token", fmt.Sprint(tok))
		}},
		{"world_writable_tree", func(h *hostile, tree string) error {
			if err := os.Chmod(tree, 0o777); err != nil {
				return err
			}
			// Anyone on the machine could now add, move or delete tasks
			// behind the journal's back: at least warn (or refuse).
			for _, args := range [][]string{{"status"}, {"add", "--id", "t1"}, {"claim"}} {
				r := h.run(tree, nil, args...)
				if r.code == 0 && !regexp.MustCompile(`(?i)world[- ]writable`).MatchString(r.stderr) {
					return fmt.Errorf("%v on a world-writable tree (mode 0777) ran without a warning: %s", args, r)
				}
			}
			return nil
		}},
		{"agent_and_reason_control_chars", func(h *hostile, tree string) error {
			if err := h.mustRun(tree, "add", "--id", "t1"); err != nil {
				return err
			}
			evil := "evil\x1b]0;pwned\x07\x1b[2J"
			r := h.run(tree, nil, "claim", "t1", "--agent", evil, "--json")
			if r.code == clitest.ExitUsage {
				return nil // refused: fine
			}
			if r.code != 0 {
				return fmt.Errorf("claim: %s", r)
			}
			var c struct{ Token uint64 }
			json.Unmarshal([]byte(r.stdout), &c)
			h.run(tree, nil, "heartbeat", "t1", "--token", fmt.Sprint(c.Token), "--agent", evil)
			h.run(tree, nil, "fail", "t1", "--token", fmt.Sprint(c.Token), "--reason", "why\x1b[31m\x07")
			var errs []error
			for _, args := range [][]string{{"status"}, {"show", "t1"}, {"log", "--heartbeats"}} {
				r := h.run(tree, nil, args...)
				if err := noControl(fmt.Sprint(args), r.stdout+r.stderr); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		}},
	}
}

// hstDiskKB is the space path takes on disk.
func hstDiskKB(path string) int64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return -1
	}
	return st.Blocks * 512 / 1024
}

func hstDirLen(dir string) int {
	entries, _ := os.ReadDir(dir)
	return len(entries)
}

// hstSnapshot describes every entry below dir without opening or
// following anything (so taking it reads nothing): path, type and mode,
// size, link count, and the modification, change and access times. A
// write shows in mtime and ctime (ctime cannot be set back from user
// space); a read of a file shows in its atime: the sentinels' atime is set
// a day back, before their ctime, so relatime updates it on the first read.
func hstSnapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s mode=%o size=%d nlink=%d mtime=%d.%09d ctime=%d.%09d", rel, st.Mode, st.Size, st.Nlink,
			st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			// A directory's atime moves whenever it is listed (by this
			// walk too); a file's only when its content is read.
			fmt.Fprintf(&b, " atime=%d.%09d", st.Atim.Sec, st.Atim.Nsec)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
