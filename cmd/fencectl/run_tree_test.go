package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Nothing CMD starts may outlive its task: a background child, a setsid
// child and a double-forked daemon, whichever way the task ends (CMD
// exits, the lease is revoked, run is killed with SIGKILL), under each
// containment run can use.

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

func TestRun_NothingOutlivesTheTask(t *testing.T) {
	for _, mode := range containments {
		t.Run(mode+"/command-exits", func(t *testing.T) {
			rt := newRunTree(t)
			rt.env = append(rt.env, containEnv+"="+mode)
			requireContainment(t, rt, mode)
			rt.ok("add", "--id", "t1")
			marks := t.TempDir()
			run, out := rt.startRun("t1", "--json", "--", "sh", "-c", treeScript(marks, "exit 0"))
			pids := treePids(t, marks)
			if code := waitExit(t, run); code != 0 {
				t.Fatalf("run exited %d, want 0\n%s", code, out)
			}
			assertDead(t, pids, nil)
			if !strings.Contains(out.String(), `"containment":"`+mode+`"`) {
				t.Errorf("run --json does not name the containment %s:\n%s", mode, out)
			}
			if st := rt.show("t1")["state"]; st != "done" {
				t.Errorf("task is %v, want done", st)
			}
		})
		t.Run(mode+"/revoke", func(t *testing.T) {
			rt := newRunTree(t)
			rt.env = append(rt.env, containEnv+"="+mode)
			requireContainment(t, rt, mode)
			rt.ok("add", "--id", "t1")
			marks := t.TempDir()
			run, out := rt.startRun("t1", "--", "sh", "-c", treeScript(marks, "while :; do sleep 0.01; done"))
			pids := treePids(t, marks)
			rt.ok("revoke", "t1")
			if code := waitExit(t, run); code != exitFenced {
				t.Fatalf("run exited %d, want 3\n%s", code, out)
			}
			assertDead(t, pids, nil)
		})
		t.Run(mode+"/sigkill-of-run", func(t *testing.T) {
			rt := newRunTree(t)
			rt.env = append(rt.env, containEnv+"="+mode)
			requireContainment(t, rt, mode)
			rt.ok("add", "--id", "t1")
			marks := t.TempDir()
			run, _ := rt.startRun("t1", "--", "sh", "-c", treeScript(marks, "while :; do sleep 0.01; done"))
			pids := treePids(t, marks)
			run.Process.Kill()
			waitExit(t, run)
			var escape map[string]bool
			if mode == containPgroup {
				// The documented limit of the weakest containment: a
				// setsid child leaves the process group.
				escape = map[string]bool{"setsid": true, "daemon": true}
			}
			waitDead(t, pids, escape)
		})
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
