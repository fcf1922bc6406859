package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// run --loop claims the next task in the commit that completes the last
// one, without waiting (see settleAndClaim). With --wait, when that claim
// finds nothing, run still waits for a task as before: one added later is
// run.
func TestRun_LoopWaitsForTheNextTask(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.StartRun("--loop", "--wait", "1h", "--agent", "looper", "--", "sh", "-c", "echo x > "+marks+"/$FENCE_TASK")
	clitest.WaitFile(t, marks+"/t1")
	// t1's completion and the claim beside it (which found nothing) are
	// one commit: once t1 is done, run is waiting.
	waitFor(t, "t1 to be done", func() bool { return rt.Show("t1")["state"] == "done" })
	rt.OK("add", "--id", "t2")
	clitest.WaitFile(t, marks+"/t2")
	waitFor(t, "t2 to be done", func() bool { return rt.Show("t2")["state"] == "done" })
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := clitest.WaitExit(t, run); code != 130 {
		t.Fatalf("run --loop --wait after SIGINT exited %d, want 130\n%s", code, out)
	}
}

// A signal that comes while a task's completion (and the next claim
// beside it) waits for the journal: the task is completed, the next one
// is not claimed, run exits 128+N.
func TestRun_LoopSignalDuringCompleteClaimsNothing(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	rt.OK("add", "--id", "t2")
	marks := t.TempDir()
	run := rt.Cmd("run", "--loop", "--agent", "looper", "--", "sh", "-c",
		"echo x > "+marks+"/started; while [ ! -f "+marks+"/go ]; do sleep 0.01; done")
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
	clitest.WaitFile(t, marks+"/started")
	// Hold the journal: t1's completion waits for it.
	lockPath := filepath.Join(rt.Dir, ".fence", "lock")
	lf, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marks+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "run to wait for the journal", func() bool {
		w, _ := clitest.LockWaiters(t, lockPath)
		return w[run.Process.Pid]
	})
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "run to take the signal", func() bool { return strings.Contains(out(), "got interrupt") })
	unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	if code := clitest.WaitExit(t, run); code != 130 {
		t.Fatalf("run --loop after SIGINT exited %d, want 130\n%s", code, out())
	}
	if st := rt.Show("t1")["state"]; st != "done" {
		t.Errorf("t1 is %v, want done: its command exited 0 before the signal", st)
	}
	if st := rt.Show("t2")["state"]; st != "available" {
		t.Errorf("t2 is %v, want available", st)
	}
	if log := rt.OK("log", "--task", "t2"); strings.Contains(log, "looper") {
		t.Errorf("run claimed t2 after its SIGINT:\n%s", log)
	}
}
