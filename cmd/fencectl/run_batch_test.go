package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/fencectl/fencectl/fence"
)

// batchTree is a tree of t1 to t4 whose run --loop never finds a core
// spare and counts every command as short: with t1's complete, it claims
// t2, t3 and t4 at once, and t2's complete waits for the commit after
// t4's command (see batchSize), or for handBackAfter (here handBack) of
// a command that runs long.
func batchTree(t *testing.T, handBack string) *clitest.RunTree {
	rt := newRunTree(t)
	rt.Env = append(rt.Env, "FENCE_TEST_SPARE_CPU=no", "FENCE_TEST_SHORT_BELOW=10s", "FENCE_TEST_HAND_BACK_AFTER="+handBack)
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		rt.OK("add", "--id", id)
	}
	return rt
}

// t3Waits is a command that records its token and, for t3 only, says it
// started and then runs the rest.
func t3Waits(marks, rest string) string {
	return `echo "$FENCE_TOKEN" >> ` + marks + `/$FENCE_TASK; if [ "$FENCE_TASK" = t3 ]; then echo x > ` + marks + `/started; ` + rest + `; fi`
}

// A command that runs long does not keep the batch waiting: the
// completes that waited for company are made, and the tasks claimed
// ahead handed back, while it runs. t3's command waits to see t2 done:
// without that, it would wait for itself.
func TestRun_LoopBatchLongCommandHandsBack(t *testing.T) {
	rt := batchTree(t, "300ms")
	marks := t.TempDir()
	waitT2 := `i=0; while [ $i -lt 200 ]; do if "$FC" show t2 --json | grep -q '"state": *"done"'; then echo saw > ` + marks + `/t2done; exit 0; fi; sleep 0.05; i=$((i+1)); done; echo timeout > ` + marks + `/t2done`
	out := rt.OK("run", "--loop", "--agent", "looper", "--", "sh", "-c", t3Waits(marks, waitT2))
	if b, _ := os.ReadFile(filepath.Join(marks, "t2done")); strings.TrimSpace(string(b)) != "saw" {
		t.Fatalf("t3's command did not see t2 done while it ran (%q)\n%s", b, out)
	}
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		if st := rt.Show(id)["state"]; st != "done" {
			t.Errorf("%s is %v, want done\n%s", id, st, out)
		}
		b, _ := os.ReadFile(filepath.Join(marks, id))
		if runs := strings.Fields(string(b)); len(runs) != 1 {
			t.Errorf("%s's command ran %d times, want once", id, len(runs))
		}
	}
	if log := rt.OK("log", "--task", "t4"); !strings.Contains(log, reasonHandedBack) {
		t.Errorf("t4, claimed ahead of the long t3, was not handed back:\n%s", log)
	}
}

// A run killed while a complete waits for company leaves nothing held:
// the task stays tied to run until its complete commits, so it is freed
// at once ("holder died"), as a task whose command was still running is,
// not when its lease runs out. Its command ran; it will run again: the
// window this leaves is the batch's (see batchSize). t2's and t3's
// commands ran, so each used an attempt; t4 was claimed ahead and never
// started, so it is released with no attempt counted (before, it was
// charged one: three kills of a busy runner, a CI job cancelled three
// times, failed tasks that had never run).
func TestRun_LoopBatchKilledFreesItsTasks(t *testing.T) {
	rt := batchTree(t, "1h")
	marks := t.TempDir()
	run, out := rt.StartRun("--loop", "--agent", "looper", "--", "sh", "-c", t3Waits(marks, "sleep 60"))
	clitest.WaitFile(t, marks+"/started")
	if st := rt.Show("t2")["state"]; st != "claimed" {
		t.Fatalf("t2 is %v while t3 runs, want claimed (its complete waits for the batch)\n%s", st, out)
	}
	if err := run.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	clitest.WaitExit(t, run)
	if dry := rt.OK("reap", "--dry-run"); !strings.Contains(dry, "t4: the process of looper") || !strings.Contains(dry, "died before it started the task; released, no attempt counted") {
		t.Errorf("reap --dry-run does not say t4 was never started:\n%s", dry)
	}
	rt.OK("reap")
	for id, attempts := range map[string]float64{"t2": 1, "t3": 1, "t4": 0} {
		show := rt.Show(id)
		if st := show["state"]; st != "available" {
			t.Errorf("%s is %v after run was killed and a reap, want available\n%s", id, st, rt.OK("log", "--task", id))
		}
		if got := show["attempts"]; got != attempts {
			t.Errorf("%s has used %v attempts after run was killed, want %v\n%s", id, got, attempts, rt.OK("log", "--task", id))
		}
	}
	if log := rt.OK("log", "--task", "t4"); !strings.Contains(log, fence.ReasonDiedUnstarted) {
		t.Errorf("t4's log does not say its holder died before starting it:\n%s", log)
	}
}

// A signal while a complete waits for company makes the complete: the
// command that ran is not run again. The task interrupted is released,
// and the tasks claimed ahead are handed back.
func TestRun_LoopBatchSignalCompletesWhatRan(t *testing.T) {
	rt := batchTree(t, "1h")
	marks := t.TempDir()
	run, out := rt.StartRun("--loop", "--agent", "looper", "--", "sh", "-c", t3Waits(marks, "sleep 60"))
	clitest.WaitFile(t, marks+"/started")
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := clitest.WaitExit(t, run); code != 130 {
		t.Fatalf("run --loop after SIGINT exited %d, want 130\n%s", code, out)
	}
	for id, want := range map[string]string{"t1": "done", "t2": "done", "t3": "available", "t4": "available"} {
		if st := rt.Show(id)["state"]; st != want {
			t.Errorf("%s is %v after run ended, want %s\n%s", id, st, want, out)
		}
	}
	if !strings.Contains(out.String(), "t2 token") {
		t.Errorf("run did not report t2's complete:\n%s", out)
	}
}

// A settle that fails for want of the journal (held by another process
// past --timeout) leaves the claim tied to run: when run then ends, the
// task is freed at once ("holder died"), not when its ten-minute lease
// runs out. Each settle: the complete of a command that exited 0, the
// fail of one that exited 1, the release of one run was told to stop.
func TestRun_FailedSettleStaysTiedUntilRunEnds(t *testing.T) {
	for _, tc := range []struct {
		name, exit string
		signal     bool
	}{
		{name: "complete", exit: "0"},
		{name: "fail", exit: "1"},
		{name: "release", exit: "0", signal: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRunTree(t)
			rt.OK("add", "--id", "t1")
			marks := t.TempDir()
			script := `echo x > ` + marks + `/started; trap 'exit 143' TERM; while [ ! -e ` + marks + `/go ]; do sleep 0.02; done; exit ` + tc.exit
			run, out := rt.StartRun("t1", "--ttl", "10m", "--timeout", "300ms", "--", "sh", "-c", script)
			clitest.WaitFile(t, marks+"/started")
			f, err := os.OpenFile(filepath.Join(rt.Dir, ".fence", "lock"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			if tc.signal {
				if err := run.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(marks+"/go", []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.name == "complete" {
				// A complete is tried again while the lease lasts (see
				// TestRun_CompleteWaitsForTheJournal); a signal ends that.
				waitBlockedInFlock(t, run.Process.Pid)
				if err := run.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			if code := clitest.WaitExit(t, run); code == 0 {
				t.Fatalf("run whose %s found the journal held exited 0\n%s", tc.name, out)
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
				t.Fatal(err)
			}
			if st := rt.Show("t1")["state"]; st != "claimed" {
				t.Fatalf("t1 is %v after its %s failed, want still claimed\n%s", st, tc.name, out)
			}
			out2 := rt.OK("claim", "--agent", "other", "--json")
			if !strings.Contains(out2, `"task":"t1"`) || !strings.Contains(rt.OK("log", "--task", "t1"), "holder died") {
				t.Errorf("t1 was not freed at once after run ended (want a reap, reason holder died, and a claim):\n%s\n%s", out2, rt.OK("log", "--task", "t1"))
			}
		})
	}
}

// A signal while the journal is held past --timeout: none of the settles
// run then makes (t3's release, t2's waiting complete, t4's hand back)
// gets through, and none of those tasks is left to its lease: each stays
// tied to run, and is freed as soon as run has ended.
func TestRun_LoopBatchSettlesThatFailStayTied(t *testing.T) {
	rt := batchTree(t, "1h")
	marks := t.TempDir()
	run, out := rt.StartRun("--loop", "--agent", "looper", "--timeout", "300ms", "--", "sh", "-c", t3Waits(marks, "sleep 60"))
	clitest.WaitFile(t, marks+"/started")
	f, err := os.OpenFile(filepath.Join(rt.Dir, ".fence", "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := clitest.WaitExit(t, run); code == 0 {
		t.Fatalf("run --loop whose settles found the journal held exited 0\n%s", out)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	// Nothing is said to have happened that did not.
	for _, line := range []string{"t2 token", "t3 token"} {
		if !regexp.MustCompile(line + ` .* (complete|release) not recorded`).MatchString(out.String()) {
			t.Errorf("run's summary of %q does not say the settle was not recorded:\n%s", line, out)
		}
	}
	rt.OK("reap")
	for _, id := range []string{"t2", "t3", "t4"} {
		if st := rt.Show(id)["state"]; st != "available" {
			t.Errorf("%s is %v after run ended and a reap, want available (freed as its holder died)\n%s\n%s", id, st, rt.OK("log", "--task", id), out)
		}
	}
}

// A complete that the journal cannot take (held by another process past
// --timeout) is tried again while the lease lasts: once the journal is
// free, the task is done and run exits 0. Before, run gave up at once,
// and the task whose command had succeeded was left to be reaped at its
// TTL, an attempt charged, and run again (found from outside, with etcd
// out of space for a minute).
func TestRun_CompleteWaitsForTheJournal(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	script := `echo x > ` + marks + `/started; while [ ! -e ` + marks + `/go ]; do sleep 0.02; done; exit 0`
	run, out := rt.StartRun("t1", "--ttl", "10m", "--timeout", "300ms", "--", "sh", "-c", script)
	clitest.WaitFile(t, marks+"/started")
	unlock := holdTreeLock(t, rt.Dir)
	if err := os.WriteFile(marks+"/go", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitBlockedInFlock(t, run.Process.Pid) // the first try
	time.Sleep(700 * time.Millisecond)     // past --timeout: that try has failed
	waitBlockedInFlock(t, run.Process.Pid) // tried again
	unlock()
	if code := clitest.WaitExit(t, run); code != 0 {
		t.Fatalf("run whose complete waited for the journal exited %d, want 0\n%s", code, out)
	}
	if st := rt.Show("t1")["state"]; st != "done" {
		t.Fatalf("t1 is %v, want done\n%s", st, out)
	}
}

// run --wait, looping or not, waits out a journal that cannot take its
// claims (a lock held past --timeout here; etcd restarting or out of
// space in the field) for up to --wait, then goes on with the work.
// Before, the first failed claim ended it, exit 5 (found from outside: a
// ten-second etcd freeze ended whole fleets of run --loop --wait).
func TestRun_WaitWaitsOutTheJournal(t *testing.T) {
	for _, loop := range []bool{true, false} {
		t.Run(map[bool]string{true: "loop", false: "once"}[loop], func(t *testing.T) {
			rt := newRunTree(t)
			args := []string{"--wait", "30s", "--timeout", "300ms", "--", "true"}
			if loop {
				args = append([]string{"--loop"}, args...)
			}
			run, out := rt.StartRun(args...)
			unlock := holdTreeLock(t, rt.Dir)
			waitBlockedInFlock(t, run.Process.Pid) // a claim tries
			time.Sleep(700 * time.Millisecond)     // past --timeout: that try has failed
			waitBlockedInFlock(t, run.Process.Pid) // and run tries again
			unlock()
			rt.OK("add", "--id", "t1")
			if !loop {
				if code := clitest.WaitExit(t, run); code != 0 {
					t.Fatalf("run --wait exited %d, want 0 (t1 done)\n%s", code, out)
				}
				if st := rt.Show("t1")["state"]; st != "done" {
					t.Fatalf("t1 is %v, want done\n%s", st, out)
				}
				return
			}
			deadline := time.Now().Add(20 * time.Second)
			for rt.Show("t1")["state"] != "done" {
				if time.Now().After(deadline) {
					t.Fatalf("t1 not done 20 s after the journal was free\n%s", out)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := run.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if code := clitest.WaitExit(t, run); code != 130 {
				t.Fatalf("run --loop after SIGINT exited %d, want 130\n%s", code, out)
			}
		})
	}
}
