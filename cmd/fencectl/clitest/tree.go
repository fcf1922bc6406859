package clitest

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binary says how to start fencectl: the executable, and environment it
// needs besides the caller's (cmd/fencectl's tests run their own test
// binary, which acts as fencectl with FENCECTL_AS_MAIN=1).
type Binary struct {
	Path string
	Env  []string
}

// Command runs fencectl on the tree dir in its own process.
func (b Binary) Command(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(b.Path, args...)
	cmd.Env = append(append(os.Environ(), b.Env...), "FENCE_DIR="+dir, "FENCE_TIMEOUT=60s")
	return cmd
}

// ExitCode is the exit code of a command that ran (-1: it could not start,
// or a signal ended it).
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// RunTree is a tree driven through the real binary, with a test clock file
// that every fencectl process (and the long-running `run`) reads when the
// binary has the test hooks (the tests that move it carry the fencetest
// tag).
type RunTree struct {
	T     *testing.T
	Bin   Binary
	Dir   string
	Clock string
	Now   time.Time
	Env   []string // more environment for every fencectl process
}

// NewRunTree makes and inits a tree in a temporary directory, its clock at
// 2030-01-01.
func NewRunTree(t *testing.T, bin Binary) *RunTree {
	t.Helper()
	base := t.TempDir()
	rt := &RunTree{T: t, Bin: bin, Dir: filepath.Join(base, "tree"), Clock: filepath.Join(base, "clock"), Now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	rt.SetClock(rt.Now)
	rt.OK("init", "--retry-backoff", "0s") // a failed run's task is claimable at once (backoff.txtar shows the backoff)
	return rt
}

// SetClock moves the test clock to at (atomically: a reader never sees a
// half-written time).
func (rt *RunTree) SetClock(at time.Time) {
	rt.Now = at
	if err := os.WriteFile(rt.Clock+".tmp", []byte(at.Format(time.RFC3339Nano)), 0o644); err != nil {
		rt.T.Fatal(err)
	}
	if err := os.Rename(rt.Clock+".tmp", rt.Clock); err != nil {
		rt.T.Fatal(err)
	}
}

// Advance moves the test clock on by d.
func (rt *RunTree) Advance(d time.Duration) { rt.SetClock(rt.Now.Add(d)) }

// Cmd makes a fencectl command on the tree, on its clock, as agent tester;
// $FC in a CMD names the binary.
func (rt *RunTree) Cmd(args ...string) *exec.Cmd {
	c := rt.Bin.Command(rt.Dir, args...)
	c.Env = append(c.Env, "FENCE_TEST_CLOCK="+rt.Clock, "FENCE_AGENT=tester", "FC="+rt.Bin.Path)
	c.Env = append(c.Env, rt.Env...)
	return c
}

// OK runs fencectl and fails the test unless it exits 0.
func (rt *RunTree) OK(args ...string) string {
	rt.T.Helper()
	out, err := rt.Cmd(args...).CombinedOutput()
	if err != nil {
		rt.T.Fatalf("fencectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Code runs fencectl and returns its exit code and combined output.
func (rt *RunTree) Code(args ...string) (int, string) {
	out, err := rt.Cmd(args...).CombinedOutput()
	return ExitCode(err), string(out)
}

// Show returns `show ID --json`.
func (rt *RunTree) Show(id string) map[string]any {
	rt.T.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(rt.OK("show", id, "--json")), &m); err != nil {
		rt.T.Fatal(err)
	}
	return m
}

// StartRun starts `fencectl run` in the background; it is killed at the
// test's end.
func (rt *RunTree) StartRun(args ...string) (*exec.Cmd, *strings.Builder) {
	rt.T.Helper()
	c := rt.Cmd(append([]string{"run"}, args...)...)
	var out strings.Builder
	var mu sync.Mutex
	c.Stdout, c.Stderr = lockedWriter{&mu, &out}, lockedWriter{&mu, &out}
	if err := c.Start(); err != nil {
		rt.T.Fatal(err)
	}
	rt.T.Cleanup(func() { c.Process.Kill() })
	return c, &out
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
