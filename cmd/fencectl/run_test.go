package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"golang.org/x/sys/unix"
)

// runTree is a tree on a test clock driven through this test binary as
// fencectl; the torture suite uses the same (clitest.RunTree).
type runTree = clitest.RunTree

func newRunTree(t *testing.T) *runTree { return clitest.NewRunTree(t, fencectlBin) }

// worker is a CMD script: it records its pid and that it started, and on
// SIGTERM records the test clock's time, then exits 143 unless told to
// ignore the signal.
func worker(dir string, ignoreTerm bool) string {
	onTerm := `cat "$FENCE_TEST_CLOCK" > ` + dir + `/term; exit 143`
	if ignoreTerm {
		onTerm = `cat "$FENCE_TEST_CLOCK" > ` + dir + `/term`
	}
	return `trap '` + onTerm + `' TERM; ` + clitest.HostPid(dir+"/pid") + `; while :; do sleep 0.02; done`
}

func TestRun_RevokeStopsCommand(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.StartRun("t1", "--ttl", "60s", "--", "sh", "-c", worker(marks, false)+`; echo never`)
	clitest.WaitFile(t, marks+"/pid")
	rt.OK("revoke", "t1", "--reason", "operator")
	if code := clitest.WaitExit(t, run); code != exitFenced {
		t.Fatalf("run exited %d, want 3\n%s", code, out)
	}
	if !strings.Contains(out.String(), "revoked") {
		t.Errorf("run's stderr does not say the lease was revoked:\n%s", out)
	}
	if st := rt.Show("t1")["state"]; st != "available" {
		t.Errorf("task is %v after the revoke, want available (run must not complete it)", st)
	}
	if _, err := os.Stat(filepath.Join(rt.Dir, "out", "t1")); !os.IsNotExist(err) {
		t.Errorf("out/t1 exists: nothing may be written for a lost lease")
	}
}

func TestRun_SignalIsForwardedAndTaskReleased(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.StartRun("t1", "--", "sh", "-c", worker(marks, false))
	clitest.WaitFile(t, marks+"/pid")
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	clitest.WaitFile(t, marks+"/term")
	if code := clitest.WaitExit(t, run); code != 143 {
		t.Fatalf("run exited %d, want CMD's 143\n%s", code, out)
	}
	m := rt.Show("t1")
	if m["state"] != "available" || m["attempts"].(float64) != 0 {
		t.Errorf("task after SIGTERM: state %v attempts %v, want available with 0 attempts (released, not failed)", m["state"], m["attempts"])
	}
	if last := m["last_lease"].(map[string]any); last["ended_by"] != "release" {
		t.Errorf("lease ended by %v, want release", last["ended_by"])
	}
}

func TestRun_KilledRunTakesCommandWithIt(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, _ := rt.StartRun("t1", "--", "sh", "-c", worker(marks, true))
	pid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
	run.Process.Kill()
	clitest.WaitExit(t, run)
	deadline := time.Now().Add(10 * time.Second)
	for clitest.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("CMD (pid %d) lives on after fencectl run was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRun_LoopFourRunnersFiftyTasks(t *testing.T) {
	rt := newRunTree(t)
	for i := 0; i < 50; i++ {
		if err := os.WriteFile(filepath.Join(rt.Dir, "inbox", fmt.Sprintf("t%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rt.OK("reap") // adopt
	marks := t.TempDir()
	var runs []*exec.Cmd
	for r := 0; r < 4; r++ {
		c, o := rt.StartRun("--loop", "--agent", fmt.Sprintf("r%d", r), "--", "sh", "-c", `echo "$FENCE_AGENT" >> `+marks+`/"$FENCE_TASK"`)
		runs = append(runs, c)
		t.Cleanup(func() { t.Log(o.String()) })
	}
	for _, c := range runs {
		if code := clitest.WaitExit(t, c); code != 0 {
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
	entries, _ := os.ReadDir(filepath.Join(rt.Dir, "done"))
	if len(entries) != 50 {
		t.Errorf("done/ holds %d tasks, want 50", len(entries))
	}
	rt.OK("replay", "--check")
}

func TestRun_CommandExitStatus(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "ok")
	rt.OK("add", "--id", "bad")
	if code, out := rt.Code("run", "ok", "--", "true"); code != 0 {
		t.Fatalf("run true: exit %d\n%s", code, out)
	}
	if st := rt.Show("ok")["state"]; st != "done" {
		t.Errorf("after CMD exit 0 the task is %v, want done", st)
	}
	code, out := rt.Code("run", "bad", "--", "sh", "-c", "exit 42")
	if code != 42 {
		t.Fatalf("run exit 42: exit %d\n%s", code, out)
	}
	m := rt.Show("bad")
	if m["state"] != "available" || m["attempts"].(float64) != 1 {
		t.Errorf("after CMD exit 42: state %v attempts %v, want available after 1 attempt", m["state"], m["attempts"])
	}
	if last := m["last_lease"].(map[string]any); last["reason"] != "exit status 42" {
		t.Errorf("fail reason %q, want %q", last["reason"], "exit status 42")
	}
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
	rt.OK("add", "--id", "t1")
	rt.OK("add", "--id", "t2")
	marks := t.TempDir()
	// The first run of t1 waits to be revoked; every later run succeeds.
	script := `if [ "$FENCE_TASK" = t1 ] && [ ! -e ` + marks + `/pid ]; then ` + worker(marks, false) + `; fi; exit 0`
	run, out := rt.StartRun("--loop", "--", "sh", "-c", script)
	clitest.WaitFile(t, marks+"/pid")
	rt.OK("revoke", "t1")
	if code := clitest.WaitExit(t, run); code != 0 {
		t.Fatalf("run --loop exited %d, want 0 after finishing the rest\n%s", code, out)
	}
	for _, id := range []string{"t1", "t2"} {
		if st := rt.Show(id)["state"]; st != "done" {
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
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	script := `echo "$FENCE_TOKEN" >> ` + marks + `/tokens; ` + worker(marks, false)
	first, _ := rt.StartRun("--request-id", "k1", "--", "sh", "-c", script)
	pid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
	code, out := rt.Code("run", "--request-id", "k1", "--", "sh", "-c", script)
	if code != exitNotAvailable || !strings.Contains(out, "in use by another live process") {
		t.Fatalf("second live run with the same request id: exit %d, want 4 naming the live holder\n%s", code, out)
	}
	if code, out := rt.Code("claim", "--request-id", "k1"); code != exitNotAvailable {
		t.Fatalf("claim with the request id of a live run: exit %d, want 4\n%s", code, out)
	}
	first.Process.Kill()
	clitest.WaitExit(t, first)
	waitFor(t, "the first run's command to die", func() bool { return !clitest.Alive(pid) })
	// The guard lets the request id go only once it has killed and reaped
	// everything of the task, a moment after CMD died (longer under -race):
	// wait until a plain claim with the id gets the claim back.
	waitFor(t, "the request id to be free", func() bool {
		code, _ := rt.Code("claim", "--request-id", "k1")
		return code == 0
	})
	os.Remove(marks + "/pid")
	again, out2 := rt.StartRun("--request-id", "k1", "--", "sh", "-c", script)
	clitest.WaitFile(t, marks+"/pid")
	b, _ := os.ReadFile(marks + "/tokens")
	if toks := strings.Fields(string(b)); len(toks) != 2 || toks[0] != toks[1] {
		t.Errorf("tokens CMD ran with: %q; want the same claim twice, one after the other", toks)
	}
	again.Process.Signal(syscall.SIGTERM)
	if code := clitest.WaitExit(t, again); code != 143 {
		t.Errorf("recovering run exited %d, want 143\n%s", code, out2)
	}
}

// SIGINT/SIGTERM while run --wait waits for a task ends it at once, and
// it claims nothing, not even a task that is ready at its next try.
func TestRun_SignalWhileWaitingClaimsNothing(t *testing.T) {
	for _, ready := range []bool{false, true} {
		t.Run(fmt.Sprintf("task-ready-%v", ready), func(t *testing.T) {
			rt := newRunTree(t)
			rt.OK("add", "--id", "t1")
			if !ready {
				rt.OK("claim", "t1", "--agent", "other")
			}
			marks := t.TempDir()
			// Hold the journal so that run's next try is parked in flock:
			// then it surely has its signal handlers in place.
			lockPath := filepath.Join(rt.Dir, ".fence", "lock")
			lf, err := os.OpenFile(lockPath, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer lf.Close()
			if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			run := rt.Cmd("run", "--wait", "1h", "--agent", "waiter", "--", "sh", "-c", "echo x > "+marks+"/ran")
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
				w, _ := clitest.LockWaiters(t, lockPath)
				return w[run.Process.Pid]
			})
			if err := run.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			// run has seen it (and given up its claim) when it says so.
			waitFor(t, "run to take the signal", func() bool { return strings.Contains(out(), "got interrupt") })
			unix.Flock(int(lf.Fd()), unix.LOCK_UN)
			if code := clitest.WaitExit(t, run); code != 130 {
				t.Fatalf("run --wait after SIGINT exited %d, want 130\n%s", code, out())
			}
			if _, err := os.Stat(marks + "/ran"); err == nil {
				t.Error("CMD ran after the SIGINT")
			}
			if strings.Contains(rt.OK("log", "--json"), `"waiter"`) {
				t.Errorf("run claimed a task after its SIGINT:\n%s", rt.OK("log"))
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
			rt.OK("add", "--id", "t1")
			marks := t.TempDir()
			name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
			run, out := rt.StartRun("t1", "--", "sh", "-c", clitest.TreeScript(marks, `trap 'echo x > `+marks+`/got; exit 1' `+name+`
echo x > `+marks+`/ready; while :; do sleep 0.01; done`))
			pids := clitest.TreePids(t, marks)
			clitest.WaitFile(t, marks+"/ready")
			run.Process.Signal(sig)
			clitest.WaitFile(t, marks+"/got")
			if code := clitest.WaitExit(t, run); code != 1 {
				t.Fatalf("run exited %d, want CMD's 1\n%s", code, out)
			}
			clitest.AssertDead(t, pids, nil)
			m := rt.Show("t1")
			if m["state"] != "available" || m["attempts"].(float64) != 0 {
				t.Errorf("task after %s: %v, %v attempts; want available, 0 (released)", sig, m["state"], m["attempts"])
			}
		})
	}
}
