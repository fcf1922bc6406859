package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// runTree is a tree driven through the real binary, with a test clock file
// that every fencectl process (and the long-running `run`) reads when built
// with the test hooks; the tests that move it are in run_clock_test.go.
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
	c.Env = append(c.Env, "FENCE_TEST_CLOCK="+rt.clock, "FENCE_AGENT=tester", "FC="+os.Args[0])
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

// worker is a CMD script: it records its pid and that it started, and on
// SIGTERM records the test clock's time, then exits 143 unless told to
// ignore the signal.
func worker(dir string, ignoreTerm bool) string {
	onTerm := `cat "$FENCE_TEST_CLOCK" > ` + dir + `/term; exit 143`
	if ignoreTerm {
		onTerm = `cat "$FENCE_TEST_CLOCK" > ` + dir + `/term`
	}
	return `trap '` + onTerm + `' TERM; ` + hostPid(dir+"/pid") + `; while :; do sleep 0.02; done`
}

// hostPid is shell code that writes the shell's pid, as the test sees it,
// to path (atomically): not $$, which is 1 inside a PID namespace
// (FENCE_RUN_CONTAINMENT=pidns), but what /proc, mounted for the test's
// namespace, says. The trap comes first in worker: the pid file is the
// signal that CMD is ready for SIGTERM.
func hostPid(path string) string {
	return `read -r _hp _ < /proc/self/stat; echo $_hp > ` + path + `.tmp; mv ` + path + `.tmp ` + path
}

func TestRun_RevokeStopsCommand(t *testing.T) {
	rt := newRunTree(t)
	rt.ok("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.startRun("t1", "--ttl", "60s", "--", "sh", "-c", worker(marks, false)+`; echo never`)
	waitFile(t, marks+"/pid")
	rt.ok("revoke", "t1", "--reason", "operator")
	waitFile(t, marks+"/term")
	if code := waitExit(t, run); code != exitFenced {
		t.Fatalf("run exited %d, want 3\n%s", code, out)
	}
	if !strings.Contains(out.String(), "revoked") {
		t.Errorf("run's stderr does not say the lease was revoked:\n%s", out)
	}
	if st := rt.show("t1")["state"]; st != "available" {
		t.Errorf("task is %v after the revoke, want available (run must not complete it)", st)
	}
	if _, err := os.Stat(filepath.Join(rt.dir, "out", "t1")); !os.IsNotExist(err) {
		t.Errorf("out/t1 exists: nothing may be written for a lost lease")
	}
}

func TestRun_SignalIsForwardedAndTaskReleased(t *testing.T) {
	rt := newRunTree(t)
	rt.ok("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.startRun("t1", "--", "sh", "-c", worker(marks, false))
	waitFile(t, marks+"/pid")
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFile(t, marks+"/term")
	if code := waitExit(t, run); code != 143 {
		t.Fatalf("run exited %d, want CMD's 143\n%s", code, out)
	}
	m := rt.show("t1")
	if m["state"] != "available" || m["attempts"].(float64) != 0 {
		t.Errorf("task after SIGTERM: state %v attempts %v, want available with 0 attempts (released, not failed)", m["state"], m["attempts"])
	}
	if last := m["last_lease"].(map[string]any); last["ended_by"] != "release" {
		t.Errorf("lease ended by %v, want release", last["ended_by"])
	}
}

func TestRun_KilledRunTakesCommandWithIt(t *testing.T) {
	rt := newRunTree(t)
	rt.ok("add", "--id", "t1")
	marks := t.TempDir()
	run, _ := rt.startRun("t1", "--", "sh", "-c", worker(marks, true))
	pid, _ := strconv.Atoi(waitFile(t, marks+"/pid"))
	run.Process.Kill()
	waitExit(t, run)
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("CMD (pid %d) lives on after fencectl run was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRun_LoopFourRunnersFiftyTasks(t *testing.T) {
	rt := newRunTree(t)
	for i := 0; i < 50; i++ {
		if err := os.WriteFile(filepath.Join(rt.dir, "inbox", fmt.Sprintf("t%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rt.ok("reap") // adopt
	marks := t.TempDir()
	var runs []*exec.Cmd
	for r := 0; r < 4; r++ {
		c, o := rt.startRun("--loop", "--agent", fmt.Sprintf("r%d", r), "--", "sh", "-c", `echo "$FENCE_AGENT" >> `+marks+`/"$FENCE_TASK"`)
		runs = append(runs, c)
		t.Cleanup(func() { t.Log(o.String()) })
	}
	for _, c := range runs {
		if code := waitExit(t, c); code != 0 {
			t.Fatalf("a runner exited %d", code)
		}
	}
	for i := 0; i < 50; i++ {
		b, err := os.ReadFile(filepath.Join(marks, fmt.Sprintf("t%02d", i)))
		if err != nil {
			t.Fatalf("task t%02d never ran: %v", i, err)
		}
		if n := strings.Count(string(b), "\n"); n != 1 {
			t.Errorf("task t%02d ran %d times", i, n)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(rt.dir, "done"))
	if len(entries) != 50 {
		t.Errorf("done/ holds %d tasks, want 50", len(entries))
	}
	rt.ok("replay", "--check")
}

func TestRun_CommandExitStatus(t *testing.T) {
	rt := newRunTree(t)
	rt.ok("add", "--id", "ok")
	rt.ok("add", "--id", "bad")
	if code, out := rt.code("run", "ok", "--", "true"); code != 0 {
		t.Fatalf("run true: exit %d\n%s", code, out)
	}
	if st := rt.show("ok")["state"]; st != "done" {
		t.Errorf("after CMD exit 0 the task is %v, want done", st)
	}
	code, out := rt.code("run", "bad", "--", "sh", "-c", "exit 42")
	if code != 42 {
		t.Fatalf("run exit 42: exit %d\n%s", code, out)
	}
	m := rt.show("bad")
	if m["state"] != "available" || m["attempts"].(float64) != 1 {
		t.Errorf("after CMD exit 42: state %v attempts %v, want available after 1 attempt", m["state"], m["attempts"])
	}
	if last := m["last_lease"].(map[string]any); last["reason"] != "exit status 42" {
		t.Errorf("fail reason %q, want %q", last["reason"], "exit status 42")
	}
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

// waitFor polls cond, an observation of something the test caused,
// failing after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lost lease ends that task only: run --loop goes on with the next.
func TestRun_LoopGoesOnAfterLostLease(t *testing.T) {
	rt := newRunTree(t)
	rt.ok("add", "--id", "t1")
	rt.ok("add", "--id", "t2")
	marks := t.TempDir()
	// The first run of t1 waits to be revoked; every later run succeeds.
	script := `if [ "$FENCE_TASK" = t1 ] && [ ! -e ` + marks + `/pid ]; then ` + worker(marks, false) + `; fi; exit 0`
	run, out := rt.startRun("--loop", "--", "sh", "-c", script)
	waitFile(t, marks+"/pid")
	rt.ok("revoke", "t1")
	if code := waitExit(t, run); code != 0 {
		t.Fatalf("run --loop exited %d, want 0 after finishing the rest\n%s", code, out)
	}
	for _, id := range []string{"t1", "t2"} {
		if st := rt.show(id)["state"]; st != "done" {
			t.Errorf("%s is %v, want done", id, st)
		}
	}
	if !strings.Contains(out.String(), "revoked") {
		t.Errorf("run does not report the lost lease:\n%s", out)
	}
}

// Two live runs with the same request id: the second is refused (exit 4)
// while the first runs CMD; once the first is dead, the request id
// recovers the same claim.
func TestRun_RequestIDHeldByLiveRun(t *testing.T) {
	rt := newRunTree(t)
	rt.ok("add", "--id", "t1")
	marks := t.TempDir()
	script := `echo "$FENCE_TOKEN" >> ` + marks + `/tokens; ` + worker(marks, false)
	first, _ := rt.startRun("--request-id", "k1", "--", "sh", "-c", script)
	pid, _ := strconv.Atoi(waitFile(t, marks+"/pid"))
	code, out := rt.code("run", "--request-id", "k1", "--", "sh", "-c", script)
	if code != exitNotAvailable || !strings.Contains(out, "in use by another live process") {
		t.Fatalf("second live run with the same request id: exit %d, want 4 naming the live holder\n%s", code, out)
	}
	if code, out := rt.code("claim", "--request-id", "k1"); code != exitNotAvailable {
		t.Fatalf("claim with the request id of a live run: exit %d, want 4\n%s", code, out)
	}
	first.Process.Kill()
	waitExit(t, first)
	waitFor(t, "the first run's command to die", func() bool { return !alive(pid) })
	os.Remove(marks + "/pid")
	again, out2 := rt.startRun("--request-id", "k1", "--", "sh", "-c", script)
	waitFile(t, marks+"/pid")
	b, _ := os.ReadFile(marks + "/tokens")
	if toks := strings.Fields(string(b)); len(toks) != 2 || toks[0] != toks[1] {
		t.Errorf("tokens CMD ran with: %q; want the same claim twice, one after the other", toks)
	}
	again.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, again); code != 143 {
		t.Errorf("recovering run exited %d, want 143\n%s", code, out2)
	}
}

// SIGINT/SIGTERM while run --wait waits for a task ends it at once, and
// it claims nothing, not even a task that is ready at its next try.
func TestRun_SignalWhileWaitingClaimsNothing(t *testing.T) {
	for _, ready := range []bool{false, true} {
		t.Run(fmt.Sprintf("task-ready-%v", ready), func(t *testing.T) {
			rt := newRunTree(t)
			rt.ok("add", "--id", "t1")
			if !ready {
				rt.ok("claim", "t1", "--agent", "other")
			}
			marks := t.TempDir()
			// Hold the journal so that run's next try is parked in flock:
			// then it surely has its signal handlers in place.
			lockPath := filepath.Join(rt.dir, ".fence", "lock")
			lf, err := os.OpenFile(lockPath, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			run := rt.cmd("run", "--wait", "1h", "--agent", "waiter", "--", "sh", "-c", "echo x > "+marks+"/ran")
			errf, err := os.Create(filepath.Join(marks, "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer errf.Close()
			run.Stderr = errf
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { run.Process.Kill() })
			out := func() string { b, _ := os.ReadFile(errf.Name()); return string(b) }
			waitFor(t, "run to wait for the journal", func() bool {
				w, _ := lockWaiters(t, lockPath)
				return w[run.Process.Pid]
			})
			if err := run.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			// run has seen it (and given up its claim) when it says so.
			waitFor(t, "run to take the signal", func() bool { return strings.Contains(out(), "got interrupt") })
			unix.Flock(int(lf.Fd()), unix.LOCK_UN)
			if code := waitExit(t, run); code != 130 {
				t.Fatalf("run --wait after SIGINT exited %d, want 130\n%s", code, out())
			}
			if _, err := os.Stat(marks + "/ran"); err == nil {
				t.Error("CMD ran after the SIGINT")
			}
			if strings.Contains(rt.ok("log", "--json"), `"waiter"`) {
				t.Errorf("run claimed a task after its SIGINT:\n%s", rt.ok("log"))
			}
		})
	}
}

// SIGHUP (the terminal closed) and SIGQUIT end run promptly: passed on to
// CMD, the task released (no attempt counted), CMD's children killed.
func TestRun_HangupIsPassedOnAndTaskReleased(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			rt := newRunTree(t)
			rt.ok("add", "--id", "t1")
			marks := t.TempDir()
			name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
			run, out := rt.startRun("t1", "--", "sh", "-c", treeScript(marks, `trap 'echo x > `+marks+`/got; exit 1' `+name+`
echo x > `+marks+`/ready; while :; do sleep 0.01; done`))
			pids := treePids(t, marks)
			waitFile(t, marks+"/ready")
			run.Process.Signal(sig)
			waitFile(t, marks+"/got")
			if code := waitExit(t, run); code != 1 {
				t.Fatalf("run exited %d, want CMD's 1\n%s", code, out)
			}
			assertDead(t, pids, nil)
			m := rt.show("t1")
			if m["state"] != "available" || m["attempts"].(float64) != 0 {
				t.Errorf("task after %s: %v, %v attempts; want available, 0 (released)", sig, m["state"], m["attempts"])
			}
		})
	}
}

// lockWaiters returns the pids waiting in /proc/locks for a flock on the
// file at path, and the pids holding one.
func lockWaiters(t testing.TB, path string) (waiting, holding map[int]bool) {
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
