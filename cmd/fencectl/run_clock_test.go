//go:build fencetest

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"golang.org/x/sys/unix"
)

// The tests of run that move the test clock (FENCE_TEST_CLOCK, read only by
// a binary built with the test hooks): graces, deadlines and periodic
// checks that are due only when the clock says so.

// A signal to run is passed on to CMD; one that ignores it is killed
// after --grace, on the lease clock.
func TestRun_IgnoredTermGetsKillAfterGrace(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.StartRun("t1", "--ttl", "60s", "--grace", "5s", "--", "sh", "-c", worker(marks, true))
	pid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	clitest.WaitFile(t, marks+"/term")
	// Still alive: the grace has not passed on the test clock.
	if !clitest.Alive(pid) {
		t.Fatalf("CMD died before its grace ran out")
	}
	rt.Advance(6 * time.Second)
	clitest.WaitExit(t, run)
	if clitest.Alive(pid) {
		t.Errorf("CMD (pid %d) still alive after run ended\n%s", pid, out)
	}
}

// A revoked lease is over: CMD, even one that ignores SIGTERM, is killed at
// once, with no grace (on a clock that does not move), since another agent
// may claim the task and CMD would write into its file.
func TestRun_RevokedCommandIsKilledAtOnce(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.StartRun("t1", "--ttl", "60s", "--grace", "5s", "--", "sh", "-c", worker(marks, true))
	pid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
	rt.OK("revoke", "t1")
	if code := clitest.WaitExit(t, run); code != exitFenced {
		t.Fatalf("run exited %d, want 3\n%s", code, out)
	}
	if clitest.Alive(pid) {
		t.Errorf("CMD (pid %d) still alive after its lease was revoked", pid)
	}
	if !strings.Contains(out.String(), "(SIGTERM, then SIGKILL)") {
		t.Errorf("stderr does not say CMD was killed at once:\n%s", out)
	}
}

func TestRun_BusyJournalStopsCommandBeforeDeadline(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.StartRun("t1", "--ttl", "30s", "--", "sh", "-c", worker(marks, false))
	clitest.WaitFile(t, marks+"/pid")
	deadline := rt.Now.Add(30 * time.Second)
	// Another process holds the journal: no heartbeat can get through.
	f, err := os.OpenFile(filepath.Join(rt.Dir, ".fence", "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	rt.Advance(20 * time.Second) // a heartbeat is due (every 10s) and fails; the lease is at risk
	stoppedAt, err := time.Parse(time.RFC3339Nano, clitest.WaitFile(t, marks+"/term"))
	if err != nil {
		t.Fatal(err)
	}
	if !stoppedAt.Before(deadline) {
		t.Errorf("CMD was stopped at %s, not before the lease deadline %s", stoppedAt, deadline)
	}
	if code := clitest.WaitExit(t, run); code != exitFenced {
		t.Fatalf("run exited %d, want 3\n%s", code, out)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	if !strings.Contains(out.String(), "no heartbeat got through") {
		t.Errorf("stderr does not explain the stop:\n%s", out)
	}
}

// A heartbeat by CMD itself with a shorter --ttl (FENCE_TTL=3s in its
// environment) moved the deadline to 3 s away without run knowing: run
// must answer with a heartbeat of its own at once, so that CMD is not
// stopped (or, worse, left running past the real deadline).
func TestRun_FollowsDeadlineShortenedByCommand(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	script := `FENCE_TTL=3s "$FC" heartbeat "$FENCE_TASK" --token "$FENCE_TOKEN" > /dev/null || exit 9
echo x > ` + marks + `/beat
while [ ! -e ` + marks + `/go ]; do sleep 0.01; done`
	run, out := rt.StartRun("t1", "--ttl", "60s", "--", "sh", "-c", script)
	clitest.WaitFile(t, marks+"/beat")
	want := rt.Now.Add(60 * time.Second).Format(time.RFC3339)
	waitFor(t, "run's own heartbeat to undo the 3s one", func() bool {
		d, _ := rt.Show("t1")["lease"].(map[string]any)["deadline"].(string)
		return d == want
	})
	rt.Advance(10 * time.Second) // past the 3 s deadline
	if err := os.WriteFile(marks+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := clitest.WaitExit(t, run); code != 0 {
		t.Fatalf("run exited %d, want 0 (the lease was kept)\n%s", code, out)
	}
	if st := rt.Show("t1")["state"]; st != "done" {
		t.Errorf("task is %v, want done", st)
	}
}

// CMD settling its own task with its own token: complete is success (run
// exits 0 and --loop goes on); release and fail stand.
func TestRun_CommandSettlesItsOwnTask(t *testing.T) {
	t.Run("complete-in-loop", func(t *testing.T) {
		rt := newRunTree(t)
		rt.OK("add", "--id", "t1")
		rt.OK("add", "--id", "t2")
		code, out := rt.Code("run", "--loop", "--", "sh", "-c", `echo "result of $FENCE_TASK" | "$FC" complete "$FENCE_TASK" --token "$FENCE_TOKEN" --result - >/dev/null`)
		if code != 0 {
			t.Fatalf("run --loop exited %d, want 0\n%s", code, out)
		}
		for _, id := range []string{"t1", "t2"} {
			if st := rt.Show(id)["state"]; st != "done" {
				t.Errorf("%s is %v, want done", id, st)
			}
			if b, err := os.ReadFile(filepath.Join(rt.Dir, "out", id, "result")); err != nil || string(b) != "result of "+id+"\n" {
				t.Errorf("out/%s/result = %q, %v", id, b, err)
			}
		}
	})
	t.Run("complete-then-keep-going", func(t *testing.T) {
		// The keeper sees the completion while CMD still runs: CMD is
		// let finish, not killed.
		rt := newRunTree(t)
		rt.OK("add", "--id", "t1")
		marks := t.TempDir()
		run, out := rt.StartRun("t1", "--", "sh", "-c", `"$FC" complete "$FENCE_TASK" --token "$FENCE_TOKEN" >/dev/null || exit 9
echo x > `+marks+`/completed
while [ ! -e `+marks+`/go ]; do sleep 0.01; done; touch `+marks+`/finished`)
		clitest.WaitFile(t, marks+"/completed")
		rt.Advance(2 * time.Second) // a periodic check is due: the keeper has seen it
		if err := os.WriteFile(marks+"/go", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if code := clitest.WaitExit(t, run); code != 0 {
			t.Fatalf("run exited %d, want 0\n%s", code, out)
		}
		if _, err := os.Stat(marks + "/finished"); err != nil {
			t.Errorf("CMD was stopped after completing its own task: %v\n%s", err, out)
		}
		if !strings.Contains(out.String(), "completed by the command") {
			t.Errorf("summary does not say the command completed the task:\n%s", out)
		}
	})
	t.Run("release", func(t *testing.T) {
		rt := newRunTree(t)
		rt.OK("add", "--id", "t1")
		marks := t.TempDir()
		// CMD hands the task back and would go on: run must stop it,
		// since the task may now go to another agent.
		run, out := rt.StartRun("t1", "--", "sh", "-c", `trap 'echo x > `+marks+`/term; exit 143' TERM
`+clitest.HostPid(marks+"/pid")+`
"$FC" release "$FENCE_TASK" --token "$FENCE_TOKEN" >/dev/null || exit 9
while :; do sleep 0.01; done`)
		pid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
		waitFor(t, "the command to be killed", func() bool { return !clitest.Alive(pid) })
		if code := clitest.WaitExit(t, run); code != 0 {
			t.Fatalf("run exited %d, want 0\n%s", code, out)
		}
		m := rt.Show("t1")
		if m["state"] != "available" || m["attempts"].(float64) != 0 {
			t.Errorf("task after release by CMD: %v, %v attempts; want available, 0", m["state"], m["attempts"])
		}
	})
	t.Run("fail", func(t *testing.T) {
		rt := newRunTree(t)
		rt.OK("add", "--id", "t1")
		code, out := rt.Code("run", "t1", "--", "sh", "-c", `"$FC" fail "$FENCE_TASK" --token "$FENCE_TOKEN" --reason mine >/dev/null || exit 9`)
		if code != 1 {
			t.Fatalf("run exited %d, want 1 (CMD failed its task)\n%s", code, out)
		}
		m := rt.Show("t1")
		if m["attempts"].(float64) != 1 || m["last_lease"].(map[string]any)["reason"] != "mine" {
			t.Errorf("task after fail by CMD: %v", m)
		}
	})
}

// Without a journal watch (inotify instances used up), run says so once,
// and still notices a revoke at its periodic check.
func TestRun_NoWatchIsReportedOnce(t *testing.T) {
	rt := newRunTree(t)
	rt.Env = append(rt.Env, "FENCE_TEST_NO_WATCH=1")
	rt.OK("add", "--id", "t1")
	rt.OK("add", "--id", "t2")
	marks := t.TempDir()
	script := `if [ "$FENCE_TASK" = t1 ] && [ ! -e ` + marks + `/pid ]; then ` + worker(marks, false) + `; fi; exit 0`
	run, out := rt.StartRun("--loop", "--", "sh", "-c", script)
	clitest.WaitFile(t, marks+"/pid")
	pid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
	rt.OK("revoke", "t1")
	rt.Advance(2 * time.Second) // the periodic check is due
	waitFor(t, "the command to be killed", func() bool { return !clitest.Alive(pid) })
	if code := clitest.WaitExit(t, run); code != 0 {
		t.Fatalf("run --loop exited %d\n%s", code, out)
	}
	if n := strings.Count(out.String(), "cannot watch the journal"); n != 1 {
		t.Errorf("the missing watch is reported %d times, want once:\n%s", n, out)
	}
}

// waitState waits until pid is in state st.
func waitState(t *testing.T, pid int, st string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); clitest.State(pid) != st; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("pid %d is in state %q, want %q", pid, clitest.State(pid), st)
		}
	}
}

// Ctrl-Z (SIGTSTP) stops run's command with run, although the command
// runs in a process group of its own. Continued before its lease is in
// danger, the command wakes and works on; continued after the point where
// it had to stop, it is killed without waking (the lease may be another
// agent's by then) and run says the lease was lost.
func TestRun_CtrlZStopsTheCommandWithRun(t *testing.T) {
	for _, c := range []struct {
		mode string
		late bool
	}{{containCgroup, false}, {containCgroup, true}, {containPidns, false}, {containPidns, true}, {containPgroup, false}, {containPgroup, true}} {
		late := c.late
		t.Run(c.mode+"/"+map[bool]string{false: "continued in time", true: "continued past the lease"}[late], func(t *testing.T) {
			rt := newRunTree(t)
			rt.Env = append(rt.Env, containEnv+"="+c.mode)
			clitest.RequireContainment(t, rt, c.mode)
			rt.OK("add", "--id", "t1")
			marks := t.TempDir()
			// A setsid child too, which the command's process group does
			// not hold: it stops with run as well (before, it worked on in
			// pidns and pgroup containment, found from outside).
			script := `trap 'echo term > ` + marks + `/term; exit 143' TERM; ` + clitest.HostPid(marks+"/pid") +
				`; setsid sh -c 'while :; do echo y >> ` + marks + `/escaped; sleep 0.01; done' & ` +
				`while :; do echo x >> ` + marks + `/beats; sleep 0.01; done`
			// A job of an interactive shell: a process group of its own,
			// whose parent (here the test) is in the same session.
			run := rt.Cmd("run", "t1", "--ttl", "30s", "--", "sh", "-c", script)
			run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			out := &strings.Builder{}
			run.Stdout, run.Stderr = out, out
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { run.Process.Kill() })
			pid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
			size := func(name string) int64 {
				st, _ := os.Stat(marks + "/" + name)
				if st == nil {
					return 0
				}
				return st.Size()
			}
			beats := func() int64 { return size("beats") + size("escaped") }
			for end := time.Now().Add(10 * time.Second); size("escaped") == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("the setsid child never wrote\n%s", out)
				}
			}
			if err := unix.Kill(run.Process.Pid, unix.SIGTSTP); err != nil {
				t.Fatal(err)
			}
			waitState(t, run.Process.Pid, "T")
			// CMD is stopped, or frozen in its cgroup (which /proc shows
			// as sleeping): either way it writes nothing more.
			time.Sleep(50 * time.Millisecond)
			stopped := beats()
			time.Sleep(200 * time.Millisecond)
			if beats() != stopped {
				t.Fatalf("the command works on while run is stopped (run %s, command %s, beats %d → %d)\n%s", clitest.State(run.Process.Pid), clitest.State(pid), stopped, beats(), out)
			}
			if late {
				rt.Advance(40 * time.Second) // past the lease's deadline
			}
			if err := unix.Kill(run.Process.Pid, unix.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if late {
				if code := clitest.WaitExit(t, run); code != exitFenced {
					t.Fatalf("run exited %d, want 3\n%s", code, out)
				}
				time.Sleep(100 * time.Millisecond) // anything left awake would write now
				if _, err := os.Stat(marks + "/term"); err == nil || beats() != stopped || clitest.Alive(pid) {
					t.Errorf("the command woke after its lease was past (term file: %v, beats %d → %d, alive %v)\n%s", err, stopped, beats(), clitest.Alive(pid), out)
				}
				return
			}
			for end := time.Now().Add(10 * time.Second); beats() == stopped; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("the command did not wake with run\n%s", out)
				}
			}
			rt.OK("revoke", "t1")
			if code := clitest.WaitExit(t, run); code != exitFenced {
				t.Fatalf("run exited %d, want 3\n%s", code, out)
			}
			if clitest.Alive(pid) {
				t.Errorf("the command (pid %d) outlived its revoked lease", pid)
			}
		})
	}
}

// Ctrl-Z that lands while run --loop starts a command: the child, still
// in run's process group until it execs, is stopped too, and the start
// waited for it for good, with the tree's lock held; neither fg nor
// SIGTERM ended it (found from outside, on the first try). run wakes such
// a child, stops the command once it is started, and fg and SIGTERM work.
// And a run stopped mid-commit kept the tree's lock while stopped: it
// now finishes the commit and starts none before it stops.
func TestRun_CtrlZWhileACommandStarts(t *testing.T) {
	rt := newRunTree(t)
	rt.Env = append(rt.Env, containEnv+"="+containPgroup)
	clitest.RequireContainment(t, rt, containPgroup)
	for i := range 2500 {
		if err := os.WriteFile(filepath.Join(rt.Dir, "inbox", fmt.Sprintf("t%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		rt.OK("reap") // adopts 256 at a time
	}
	for try := range 8 {
		run := rt.Cmd("run", "--loop", "--agent", fmt.Sprintf("r%d", try), "--", "true")
		run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a job of a shell
		out := &strings.Builder{}
		run.Stdout, run.Stderr = out, out
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+37*try) * time.Millisecond) // commands starting all the while
		_ = unix.Kill(-run.Process.Pid, unix.SIGTSTP)
		waitState(t, run.Process.Pid, "T")
		// Stopped, run holds no lock of the tree: another command goes
		// on (before, run stopped mid-commit kept everyone out, exit 5).
		if code, out := rt.Code("reap", "--timeout", "2s"); code != 0 {
			_ = unix.Kill(-run.Process.Pid, unix.SIGCONT)
			t.Fatalf("try %d: reap while run was stopped: exit %d\n%s", try, code, out)
		}
		_ = unix.Kill(-run.Process.Pid, unix.SIGCONT)
		_ = unix.Kill(run.Process.Pid, unix.SIGTERM)
		done := make(chan struct{})
		go func() { run.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			run.Process.Kill()
			t.Fatalf("try %d: run did not end 20 s after ^Z, fg and SIGTERM (state %s)\n%s", try, clitest.State(run.Process.Pid), out)
		}
	}
	if code, out := rt.Code("status", "--timeout", "2s"); code != 0 {
		t.Fatalf("status after the runs: exit %d\n%s", code, out)
	}
}
