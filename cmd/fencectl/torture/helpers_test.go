package torture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fencectlBin is the real fencectl binary every test runs (see TestMain).
var fencectlBin string

// TestMain builds cmd/fencectl once into a temporary directory, with the
// build tags and the race detector of this test binary: `go test -tags
// fencetest` tests a binary with the test hooks, a plain `go test` one
// without them, and `make test-race` a race-built one, as before the suite
// left package main, where the test binary ran itself as fencectl.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencectl-torture")
	if err != nil {
		fmt.Fprintln(os.Stderr, "torture set-up:", err)
		os.Exit(1)
	}
	fencectlBin = filepath.Join(dir, "fencectl")
	code := 1
	if err := buildFencectl(fencectlBin); err != nil {
		fmt.Fprintln(os.Stderr, "torture set-up:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildFencectl builds cmd/fencectl to out with this test binary's -tags
// and -race (read from its build information).
func buildFencectl(out string) error {
	args := []string{"build", "-o", out}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "-tags" && s.Value != "":
				args = append(args, "-tags", s.Value)
			case s.Key == "-race" && s.Value == "true":
				args = append(args, "-race")
			}
		}
	}
	args = append(args, "github.com/fencectl/fencectl/cmd/fencectl")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// fencectl's exit codes (README, "Exit codes"), and the environment
// variable that forces run's containment, as the binary knows them.
const (
	exitOK           = 0
	exitError        = 1
	exitUsage        = 2
	exitFenced       = 3
	exitNotAvailable = 4
	exitBusy         = 5
	exitNoSuchTask   = 6
	exitDrift        = 7

	containEnv    = "FENCE_RUN_CONTAINMENT"
	containCgroup = "cgroup"
	containPidns  = "pidns"
	containPgroup = "pgroup"
)

// fencectlCmd runs fencectl (fencectlBin) on the tree dir in its own process.
func fencectlCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(fencectlBin, args...)
	cmd.Env = append(os.Environ(), "FENCE_DIR="+dir, "FENCE_TIMEOUT=60s")
	return cmd
}

// exitCode is the exit code of a command that ran (-1: it could not start,
// or a signal ended it).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// ---- the report of make torture ----

// tortureFull reports whether this is the full run (make torture).
func tortureFull() bool { return os.Getenv("FENCE_TORTURE") == "full" }

// tortureScale picks the size of a torture part: small in make test, full
// in make torture. FENCE_TORTURE_SCALE=N (a percentage) scales the full
// size for quick experiments.
func tortureScale(small, full int) int {
	if !tortureFull() {
		return small
	}
	if p, err := strconv.Atoi(os.Getenv("FENCE_TORTURE_SCALE")); err == nil && p > 0 {
		return max(small, full*p/100)
	}
	return full
}

var reportMu sync.Mutex

// tortureReport records the figures of one torture part. Metric values are
// numbers or short strings; "ok" (bool) says whether the part's checks
// passed. Without FENCE_TORTURE_REPORT it only logs them.
func tortureReport(t testing.TB, part string, metrics map[string]any) {
	t.Helper()
	metrics["part"] = part
	metrics["ok"] = !t.Failed()
	metrics["at"] = time.Now().UTC().Format(time.RFC3339)
	b, err := json.Marshal(metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("torture report: %s", b)
	path := os.Getenv("FENCE_TORTURE_REPORT")
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// ---- reading a tree: its log, its directories, replay --check ----

// tortCmd makes a fencectl command for one tree (fencectlCmd, or runTree.cmd
// with its test clock).
type tortCmd func(args ...string) *exec.Cmd

// tortEvent is one line of `log --json`.
type tortEvent struct {
	Seq    uint64 `json:"seq"`
	Type   string `json:"type"`
	Task   string `json:"task"`
	From   string `json:"from"`
	To     string `json:"to"`
	Agent  string `json:"agent"`
	Token  uint64 `json:"token"`
	Reason string `json:"reason"`
}

// tortLog returns the whole event log, heartbeats included.
func tortLog(t testing.TB, mk tortCmd) []tortEvent {
	t.Helper()
	c := mk("log", "--json", "--heartbeats")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("log --json: %v\n%s", err, stderr.Bytes())
	}
	var evs []tortEvent
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev tortEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("log line %q: %v", sc.Bytes(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// tortFinding is one entry of `replay --json` findings.
type tortFinding struct {
	Kind   string `json:"kind"`
	Task   string `json:"task"`
	Dir    string `json:"dir"`
	Detail string `json:"detail"`
	Fixed  bool   `json:"fixed"`
}

// tortReplay runs `replay [--check] --json` and returns its exit code, the
// findings and the raw output (for failure messages).
func tortReplay(t testing.TB, mk tortCmd, check bool) (int, []tortFinding, string) {
	t.Helper()
	args := []string{"replay", "--json"}
	if check {
		args = append(args, "--check")
	}
	c := mk(args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	code := exitCode(c.Run())
	var rep struct {
		Findings []tortFinding `json:"findings"`
	}
	if code == 0 || code == exitDrift {
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("replay output %q: %v", stdout.Bytes(), err)
		}
	}
	return code, rep.Findings, stdout.String() + stderr.String()
}

// tortCheckClean fails unless `replay --check` exits 0 with no findings
// (which includes bbolt's own consistency check, as bbolt_check findings).
func tortCheckClean(t testing.TB, mk tortCmd, when string) {
	t.Helper()
	if code, fs, out := tortReplay(t, mk, true); code != 0 || len(fs) != 0 {
		t.Errorf("%s: replay --check exit %d with %d findings, want 0 and none:\n%s", when, code, len(fs), out)
	}
}

// tortStateDirs are the directories a task file can be in.
var tortStateDirs = []string{"available", "claimed", "done", "failed"}

// tortFiles lists where each task file is: id → directories.
func tortFiles(t testing.TB, root string) map[string][]string {
	t.Helper()
	where := map[string][]string{}
	for _, d := range tortStateDirs {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			where[e.Name()] = append(where[e.Name()], d)
		}
	}
	return where
}

// tortDirLen is the number of entries in root/sub (-1 if it cannot be read).
func tortDirLen(root, sub string) int {
	entries, err := os.ReadDir(filepath.Join(root, sub))
	if err != nil {
		return -1
	}
	return len(entries)
}

// tortStates folds the log into each task's state (the last event's
// destination).
func tortStates(evs []tortEvent) map[string]string {
	st := map[string]string{}
	for _, ev := range evs {
		st[ev.Task] = ev.To
	}
	return st
}

// tortAudit compares the directories with the journal's states: every task
// the journal knows has exactly one file, in its state's directory, and no
// other file is in a state directory. It returns one line per problem, and
// the number of lost and duplicated tasks.
func tortAudit(t testing.TB, root string, states map[string]string) (problems []string, lost, dups int) {
	t.Helper()
	where := tortFiles(t, root)
	ids := make([]string, 0, len(states))
	for id := range states {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		dirs := where[id]
		switch {
		case len(dirs) == 0:
			lost++
			problems = append(problems, fmt.Sprintf("task %s (%s in the journal) has no file in any state directory", id, states[id]))
		case len(dirs) > 1:
			dups++
			problems = append(problems, fmt.Sprintf("task %s has files in %v", id, dirs))
		case dirs[0] != states[id]:
			problems = append(problems, fmt.Sprintf("task %s is in %s/, the journal says %s", id, dirs[0], states[id]))
		}
	}
	for id, dirs := range where {
		if _, ok := states[id]; !ok {
			problems = append(problems, fmt.Sprintf("%s/%s is a file the journal does not know", dirs[0], id))
		}
	}
	return problems, lost, dups
}

// tortFencing walks the event log as a fencing register per task:
// claim tokens strictly increase across the whole log; a claim happens
// only on a task nobody holds; every fenced event (heartbeat, put,
// complete, release, fail) carries the token of the claim in force; and
// complete happens at most once per task unless it was requeued. It
// returns the violations and the number of tasks completed twice.
func tortFencing(evs []tortEvent) (problems []string, doubleCompletions int) {
	var lastClaim uint64
	holder := map[string]uint64{}
	completed := map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case "claim":
			if ev.Token <= lastClaim {
				problems = append(problems, fmt.Sprintf("seq %d: claim token %d of %s does not exceed the previous claim token %d", ev.Seq, ev.Token, ev.Task, lastClaim))
			}
			lastClaim = max(lastClaim, ev.Token)
			if h := holder[ev.Task]; h != 0 {
				problems = append(problems, fmt.Sprintf("seq %d: %s claimed with token %d while token %d still held it", ev.Seq, ev.Task, ev.Token, h))
			}
			holder[ev.Task] = ev.Token
		case "heartbeat", "put":
			if h := holder[ev.Task]; h != ev.Token {
				problems = append(problems, fmt.Sprintf("seq %d: %s of %s accepted with token %d, the holder's is %d", ev.Seq, ev.Type, ev.Task, ev.Token, h))
			}
		case "complete", "release", "fail":
			if h := holder[ev.Task]; h != ev.Token {
				problems = append(problems, fmt.Sprintf("seq %d: %s of %s accepted with token %d, the holder's is %d", ev.Seq, ev.Type, ev.Task, ev.Token, h))
			}
			delete(holder, ev.Task)
			if ev.Type == "complete" {
				completed[ev.Task]++
				if completed[ev.Task] == 2 {
					doubleCompletions++
					problems = append(problems, fmt.Sprintf("seq %d: %s completed a second time (token %d)", ev.Seq, ev.Task, ev.Token))
				}
			}
		case "reap", "revoke":
			if holder[ev.Task] == 0 {
				problems = append(problems, fmt.Sprintf("seq %d: %s of %s, which nobody held", ev.Seq, ev.Type, ev.Task))
			}
			delete(holder, ev.Task)
		case "requeue":
			completed[ev.Task] = 0
		}
	}
	return problems, doubleCompletions
}

// tortClaim claims id with a long lease and returns the token.
func tortClaim(rt *runTree, id string, ttl string) string {
	rt.t.Helper()
	var c struct {
		Token uint64 `json:"token"`
	}
	out := rt.ok("claim", id, "--json", "--ttl", ttl, "--agent", "holder")
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Token == 0 {
		rt.t.Fatalf("claim %s: %q: %v", id, out, err)
	}
	return fmt.Sprint(c.Token)
}

func tortWrite(t testing.TB, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// tortSnapshot is what a failed command must not change.
type tortSnapshot struct {
	events int
	states map[string]string
	files  map[string][]string
	staged int
	outs   []string
}

func tortSnapshotOf(t *testing.T, mk tortCmd, dir string) tortSnapshot {
	t.Helper()
	evs := tortLog(t, mk)
	var outs []string
	filepath.WalkDir(filepath.Join(dir, "out"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			outs = append(outs, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	return tortSnapshot{events: len(evs), states: tortStates(evs), files: tortFiles(t, dir), staged: max(tortDirLen(dir, ".fence/tmp"), 0), outs: outs}
}

func (a tortSnapshot) diff(b tortSnapshot) string {
	var d []string
	if a.events != b.events {
		d = append(d, fmt.Sprintf("events %d → %d", a.events, b.events))
	}
	if fmt.Sprint(a.states) != fmt.Sprint(b.states) {
		d = append(d, fmt.Sprintf("journal states %v → %v", a.states, b.states))
	}
	if fmt.Sprint(a.files) != fmt.Sprint(b.files) {
		d = append(d, fmt.Sprintf("files %v → %v", a.files, b.files))
	}
	if a.staged != b.staged {
		d = append(d, fmt.Sprintf(".fence/tmp entries %d → %d", a.staged, b.staged))
	}
	if fmt.Sprint(a.outs) != fmt.Sprint(b.outs) {
		d = append(d, fmt.Sprintf("outputs %v → %v", a.outs, b.outs))
	}
	return strings.Join(d, "; ")
}

// tortWaitFor polls cond (an observation of an event the test caused, such as a
// process entering a state) until it holds, failing after a bound.
func tortWaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tortLockWaiters returns the pids waiting in /proc/locks for a flock on the
// file at path, and the pids holding one.
func tortLockWaiters(t testing.TB, path string) (waiting, holding map[int]bool) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	ino := ":" + strconv.FormatUint(st.Ino, 10)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	waiting, holding = map[int]bool{}, map[int]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		blocked := len(f) > 1 && f[1] == "->"
		if blocked {
			f = append(f[:1], f[2:]...)
		}
		// 1: FLOCK ADVISORY WRITE <pid> <maj:min:ino> 0 EOF
		if len(f) < 6 || f[1] != "FLOCK" || !strings.HasSuffix(f[5], ino) {
			continue
		}
		pid, err := strconv.Atoi(f[4])
		if err != nil {
			continue
		}
		if blocked {
			waiting[pid] = true
		} else {
			holding[pid] = true
		}
	}
	return waiting, holding
}

// ---- a tree on the test clock, and fencectl run ----

// runTree is a tree driven through the real binary, with a test clock file
// that every fencectl process (and the long-running `run`) reads when the
// binary has the test hooks (the tests that move it carry the fencetest
// tag). A copy of cmd/fencectl's own, which runs itself as fencectl.
type runTree struct {
	t     *testing.T
	dir   string
	clock string
	now   time.Time
	env   []string // more environment for every fencectl process
}

func newRunTree(t *testing.T) *runTree {
	t.Helper()
	base := t.TempDir()
	rt := &runTree{t: t, dir: filepath.Join(base, "tree"), clock: filepath.Join(base, "clock"), now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	rt.setClock(rt.now)
	rt.ok("init")
	return rt
}

func (rt *runTree) setClock(at time.Time) {
	rt.now = at
	if err := os.WriteFile(rt.clock+".tmp", []byte(at.Format(time.RFC3339Nano)), 0o644); err != nil {
		rt.t.Fatal(err)
	}
	if err := os.Rename(rt.clock+".tmp", rt.clock); err != nil {
		rt.t.Fatal(err)
	}
}

func (rt *runTree) advance(d time.Duration) { rt.setClock(rt.now.Add(d)) }

func (rt *runTree) cmd(args ...string) *exec.Cmd {
	c := fencectlCmd(rt.dir, args...)
	c.Env = append(c.Env, "FENCE_TEST_CLOCK="+rt.clock, "FENCE_AGENT=tester", "FC="+fencectlBin)
	c.Env = append(c.Env, rt.env...)
	return c
}

// ok runs fencectl and fails the test unless it exits 0.
func (rt *runTree) ok(args ...string) string {
	rt.t.Helper()
	out, err := rt.cmd(args...).CombinedOutput()
	if err != nil {
		rt.t.Fatalf("fencectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// code runs fencectl and returns its exit code and combined output.
func (rt *runTree) code(args ...string) (int, string) {
	out, err := rt.cmd(args...).CombinedOutput()
	return exitCode(err), string(out)
}

func (rt *runTree) show(id string) map[string]any {
	rt.t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(rt.ok("show", id, "--json")), &m); err != nil {
		rt.t.Fatal(err)
	}
	return m
}

// startRun starts `fencectl run` in the background.
func (rt *runTree) startRun(args ...string) (*exec.Cmd, *strings.Builder) {
	rt.t.Helper()
	c := rt.cmd(append([]string{"run"}, args...)...)
	var out strings.Builder
	var mu sync.Mutex
	c.Stdout, c.Stderr = lockedWriter{&mu, &out}, lockedWriter{&mu, &out}
	if err := c.Start(); err != nil {
		rt.t.Fatal(err)
	}
	rt.t.Cleanup(func() { c.Process.Kill() })
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

// waitFile waits for path to exist (an event the command under test
// causes), failing after a generous bound.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
	return ""
}

// waitExit waits for c to end and returns its exit code.
func waitExit(t *testing.T, c *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return exitCode(err)
	case <-time.After(30 * time.Second):
		t.Fatal("fencectl run did not end")
	}
	return -1
}

// hostPid is shell code that writes the shell's pid, as the test sees it,
// to path (atomically): not $$, which is 1 inside a PID namespace
// (FENCE_RUN_CONTAINMENT=pidns), but what /proc, mounted for the test's
// namespace, says. The trap comes first in worker: the pid file is the
// signal that CMD is ready for SIGTERM.
func hostPid(path string) string {
	return `read -r _hp _ < /proc/self/stat; echo $_hp > ` + path + `.tmp; mv ` + path + `.tmp ` + path
}

// alive reports whether pid runs: it exists and is not a zombie waiting
// for init to reap it (CMD's parent, fencectl run, may be gone).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// ---- process trees under fencectl run ----

// containments are the ways run can keep a command's process tree; the
// helpers below start such a tree and check that nothing of it outlives
// its task (copies of cmd/fencectl's run_tree_test.go).
var containments = []string{containCgroup, containPidns, containPgroup}

// treeKids are the processes treeScript starts besides CMD itself.
var treeKids = []string{"bg", "setsid", "daemon"}

// treeScript is a CMD that starts a process tree — a background child,
// a setsid child, a daemon (double fork, setsid) — each recording its pid
// (as the test sees it) in marks/NAME, then records its own in marks/cmd,
// then does then.
func treeScript(marks, then string) string {
	spawn := filepath.Join(marks, "spawn.sh")
	_ = os.WriteFile(spawn, []byte("#!/bin/sh\n"+hostPid(marks+`/$1`)+"\nexec sleep 1000 </dev/null >/dev/null 2>&1\n"), 0o755)
	return `trap 'exit 143' TERM
sh ` + spawn + ` bg &
setsid sh ` + spawn + ` setsid &
sh -c 'setsid sh ` + spawn + ` daemon &' &
while [ ! -e ` + marks + `/bg ] || [ ! -e ` + marks + `/setsid ] || [ ! -e ` + marks + `/daemon ]; do sleep 0.01; done
` + hostPid(marks+"/cmd") + `
` + then
}

// treePids reads the pids treeScript recorded, and kills them all at the
// test's end, whatever happened.
func treePids(t *testing.T, marks string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, name := range append([]string{"cmd"}, treeKids...) {
		pid, err := strconv.Atoi(waitFile(t, filepath.Join(marks, name)))
		if err != nil {
			t.Fatal(err)
		}
		pids[name] = pid
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pids
}

// requireContainment fails the test unless the forced containment can be
// used here, and skips it (saying why) when the machine does not allow it:
// run refuses a forced containment it cannot have, before any claim.
func requireContainment(t *testing.T, rt *runTree, mode string) {
	t.Helper()
	code, out := rt.code("run", "--", "true")
	switch {
	case code == exitNotAvailable:
	case code == exitError && strings.Contains(out, containEnv+"="+mode):
		t.Skipf("this machine does not allow %s containment: %s", mode, out)
	default:
		t.Fatalf("run on an empty tree with %s=%s: exit %d, want 4\n%s", containEnv, mode, code, out)
	}
}

// assertDead fails for every process in pids still alive (zombies are
// dead), but those in except.
func assertDead(t *testing.T, pids map[string]int, except map[string]bool) {
	t.Helper()
	for name, pid := range pids {
		if !except[name] && alive(pid) {
			t.Errorf("%s (pid %d) outlived its task", name, pid)
		}
	}
}

// waitDead waits (bounded) for the processes in pids to die: after a
// SIGKILL of run, others (the guard, the kernel) kill them.
func waitDead(t *testing.T, pids map[string]int, except map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		left := false
		for name, pid := range pids {
			left = left || (!except[name] && alive(pid))
		}
		if !left {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	assertDead(t, pids, except)
}
