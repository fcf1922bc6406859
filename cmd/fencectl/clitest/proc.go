package clitest

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

	"golang.org/x/sys/unix"
)

// WaitFile waits for path to exist (an event the command under test
// causes), failing after a generous bound.
func WaitFile(t testing.TB, path string) string {
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

// WaitExit waits for c to end and returns its exit code.
func WaitExit(t testing.TB, c *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return ExitCode(err)
	case <-time.After(30 * time.Second):
		t.Fatal("fencectl run did not end")
	}
	return -1
}

// HostPid is shell code that writes the shell's pid, as the test sees it,
// to path (atomically): not $$, which is 1 inside a PID namespace
// (FENCE_RUN_CONTAINMENT=pidns), but what /proc, mounted for the test's
// namespace, says. A worker sets its trap first: the pid file is the
// signal that CMD is ready for SIGTERM.
func HostPid(path string) string {
	return `read -r _hp _ < /proc/self/stat; echo $_hp > ` + path + `.tmp; mv ` + path + `.tmp ` + path
}

// Alive reports whether pid runs: it exists and is not a zombie waiting
// for init to reap it (CMD's parent, fencectl run, may be gone).
func Alive(pid int) bool {
	st := State(pid)
	return st != "" && st != "Z" && st != "X"
}

// State is pid's state letter in /proc ("T": stopped, "Z": a zombie), or
// "" when there is no such process.
func State(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// LockWaiters returns the pids waiting in /proc/locks for a flock on the
// file at path, and the pids holding one.
func LockWaiters(t testing.TB, path string) (waiting, holding map[int]bool) {
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

// ---- process trees under fencectl run ----

// Containments are the ways run can keep a command's process tree.
var Containments = []string{ContainCgroup, ContainPidns, ContainPgroup}

// TreeKids are the processes TreeScript starts besides CMD itself.
var TreeKids = []string{"bg", "setsid", "daemon"}

// TreeScript is a CMD that starts a process tree — a background child,
// a setsid child, a daemon (double fork, setsid) — each recording its pid
// (as the test sees it) in marks/NAME, then records its own in marks/cmd,
// then does then.
func TreeScript(marks, then string) string {
	spawn := filepath.Join(marks, "spawn.sh")
	_ = os.WriteFile(spawn, []byte("#!/bin/sh\n"+HostPid(marks+`/$1`)+"\nexec sleep 1000 </dev/null >/dev/null 2>&1\n"), 0o755)
	return `trap 'exit 143' TERM
sh ` + spawn + ` bg &
setsid sh ` + spawn + ` setsid &
sh -c 'setsid sh ` + spawn + ` daemon &' &
while [ ! -e ` + marks + `/bg ] || [ ! -e ` + marks + `/setsid ] || [ ! -e ` + marks + `/daemon ]; do sleep 0.01; done
` + HostPid(marks+"/cmd") + `
` + then
}

// TreePids reads the pids TreeScript recorded, and kills them all at the
// test's end, whatever happened.
func TreePids(t testing.TB, marks string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, name := range append([]string{"cmd"}, TreeKids...) {
		pid, err := strconv.Atoi(WaitFile(t, filepath.Join(marks, name)))
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

// RequireContainment fails the test unless the forced containment can be
// used here, and skips it (saying why) when the machine does not allow it:
// run refuses a forced containment it cannot have, before any claim.
func RequireContainment(t testing.TB, rt *RunTree, mode string) {
	t.Helper()
	code, out := rt.Code("run", "--", "true")
	switch {
	case code == ExitNotAvailable:
	case code == ExitError && strings.Contains(out, ContainEnv+"="+mode):
		t.Skipf("this machine does not allow %s containment: %s", mode, out)
	default:
		t.Fatalf("run on an empty tree with %s=%s: exit %d, want 4\n%s", ContainEnv, mode, code, out)
	}
}

// AssertDead fails for every process in pids still alive (zombies are
// dead), but those in except.
func AssertDead(t testing.TB, pids map[string]int, except map[string]bool) {
	t.Helper()
	for name, pid := range pids {
		if !except[name] && Alive(pid) {
			t.Errorf("%s (pid %d) outlived its task", name, pid)
		}
	}
}

// WaitDead waits (bounded) for the processes in pids to die: after a
// SIGKILL of run, others (the guard, the kernel) kill them.
func WaitDead(t testing.TB, pids map[string]int, except map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		left := false
		for name, pid := range pids {
			left = left || (!except[name] && Alive(pid))
		}
		if !left {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	AssertDead(t, pids, except)
}
