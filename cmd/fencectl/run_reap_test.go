package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// exitedChild starts a child that exits at once and returns its pid once
// it is a zombie (waitid with WNOWAIT blocks until then, reaping nothing).
func exitedChild(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if got := siginfoPid(&info); got != pid {
		t.Fatalf("siginfoPid = %d, want %d", got, pid)
	}
	return pid
}

// reaped reports whether pid is no longer a child of this process
// (without reaping it).
func reaped(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return errors.Is(err, unix.ECHILD)
}

// reapOrphans reaps a dead orphan without a scan of /proc, and leaves
// CMD (whose own Wait reaps it) and spare children alone.
//
// It runs in a process of its own: reapOrphans reaps any dead child it is
// not told to spare, so in the test binary it would reap the children of
// tests running beside it, and theirs this one's.
func TestRun_ReapOrphansReapsOnlyOrphans(t *testing.T) {
	if os.Getenv("FENCE_TEST_REAP_ALONE") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRun_ReapOrphansReapsOnlyOrphans$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "FENCE_TEST_REAP_ALONE=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestRun_ReapOrphansReapsOnlyOrphans") {
			t.Fatalf("the test in a process of its own: %v\n%s", err, out)
		}
		return
	}
	orphan := exitedChild(t)
	reapOrphans(map[int]bool{}, 0)
	if !reaped(orphan) {
		t.Error("a dead orphan is still a zombie after reapOrphans")
	}
	cmd := exitedChild(t)
	reapOrphans(map[int]bool{cmd: true}, cmd)
	if reaped(cmd) {
		t.Error("reapOrphans reaped CMD, which its own Wait reaps")
	}
	spare := exitedChild(t)
	reapOrphans(map[int]bool{spare: true}, cmd)
	if reaped(spare) {
		t.Error("reapOrphans reaped a spare child")
	}
	for _, pid := range []int{cmd, spare} {
		if _, err := unix.Wait4(pid, nil, 0, nil); err != nil {
			t.Errorf("wait for %d: %v", pid, err)
		}
	}
}

// processes finds this process and its parent.
func TestRun_ProcessesListsThisProcess(t *testing.T) {
	for _, p := range processes() {
		if p.pid == os.Getpid() {
			if p.ppid != os.Getppid() || p.zombie {
				t.Errorf("this process listed as %+v, want ppid %d, alive", p, os.Getppid())
			}
			return
		}
	}
	t.Error("processes() does not list this process")
}

// hasChildren says whether any child is left, dead or alive: the check
// killAll makes instead of a scan of /proc.
func TestRun_HasChildren(t *testing.T) {
	if hasChildren() {
		t.Skip("this test process already has children")
	}
	pid := exitedChild(t)
	if !hasChildren() {
		t.Error("hasChildren is false with a zombie child")
	}
	if _, err := unix.Wait4(pid, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if !hasChildren() {
		t.Error("hasChildren is false with a live child")
	}
	c.Process.Kill()
	c.Wait()
	if hasChildren() {
		t.Error("hasChildren is true with no child left")
	}
}
