package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// A `fencectl run` killed with SIGKILL frees its task at once: the next
// claim finds its holder dead (its liveness lock gone with the process)
// and reaps it, reason "holder died", attempt counted, without waiting
// for the ten-minute TTL (the test clock never moves).
func TestRun_KilledRunFreesItsTaskAtOnce(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, _ := rt.StartRun("t1", "--ttl", "10m", "--", "sh", "-c", worker(marks, true))
	clitest.WaitFile(t, marks+"/pid")

	// While run lives, its task is held: nothing to claim, nothing reaped.
	if code, out := rt.Code("claim", "--agent", "other"); code != exitNotAvailable {
		t.Fatalf("claim while run lives: exit %d, want 4\n%s", code, out)
	}
	if out := rt.OK("reap", "--dry-run"); !strings.Contains(out, "no expired leases") {
		t.Fatalf("reap --dry-run while run lives:\n%s", out)
	}
	if out := rt.OK("status", "--json"); strings.Contains(out, `"ended"`) {
		t.Fatalf("status while run lives says its lease ended:\n%s", out)
	}

	run.Process.Kill()
	clitest.WaitExit(t, run)
	if out := rt.OK("status", "--json"); !strings.Contains(out, `"ended":"holder died"`) {
		t.Fatalf("status after the kill does not say the holder died:\n%s", out)
	}
	if out := rt.OK("reap", "--dry-run"); !strings.Contains(out, "t1: the process of tester") || !strings.Contains(out, "died") {
		t.Fatalf("reap --dry-run after the kill does not name the dead holder:\n%s", out)
	}
	out := rt.OK("claim", "--agent", "other", "--json")
	var c struct {
		Task string `json:"task"`
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Task != "t1" {
		t.Fatalf("claim after the kill: %v\n%s", err, out)
	}
	last := rt.Show("t1")
	if last["attempts"].(float64) != 1 {
		t.Errorf("attempts %v after the holder died, want 1", last["attempts"])
	}
	log := rt.OK("log", "--task", "t1", "--json")
	if !strings.Contains(log, `"type":"reap"`) || !strings.Contains(log, `"reason":"holder died"`) {
		t.Errorf("log has no reap with reason \"holder died\":\n%s", log)
	}
	// The dead holder's liveness file goes with the next reap.
	rt.OK("reap")
	if left, _ := filepath.Glob(filepath.Join(rt.Dir, ".fence", "live", "*")); len(left) != 0 {
		t.Errorf("liveness files left after the reap: %v", left)
	}
}

// A bare claim is not tied to its process: the agent outlives its shell
// and comes back with its token, so the claim keeps its lease to the TTL.
func TestClaim_BareClaimOutlivesItsProcess(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	rt.OK("claim", "t1", "--ttl", "10m")
	if code, out := rt.Code("claim", "--agent", "other"); code != exitNotAvailable {
		t.Fatalf("claim after the first claim's process exited: exit %d, want 4 (the lease holds)\n%s", code, out)
	}
	if entries, _ := os.ReadDir(filepath.Join(rt.Dir, ".fence", "live")); len(entries) != 0 {
		t.Errorf("a bare claim left liveness files: %v", entries)
	}
}

// A run that finishes leaves no liveness file behind.
func TestRun_FinishedRunLeavesNoLivenessFile(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	if code, out := rt.Code("run", "t1", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	if entries, _ := os.ReadDir(filepath.Join(rt.Dir, ".fence", "live")); len(entries) != 0 {
		t.Errorf("liveness files left by a finished run: %v", entries)
	}
}

// A run killed right after its claim commits, before anything else (its
// keeper, its command), frees the task at once too: the claim was tied
// to run in its own commit, not after it.
func TestRun_KilledRightAfterItsClaimFreesItsTask(t *testing.T) {
	for _, loop := range []bool{false, true} {
		rt := newRunTree(t)
		rt.OK("add", "--id", "t1")
		args := []string{"run", "t1", "--ttl", "10m", "--", "true"}
		if loop {
			args = []string{"run", "--loop", "--ttl", "10m", "--", "true"}
		}
		rt.Env = append(rt.Env, "FENCE_CRASH=claim:after-commit")
		if code, out := rt.Code(args...); code != 99 {
			t.Fatalf("%v with a crash after the claim's commit: exit %d, want 99 (the test crash)\n%s", args, code, out)
		}
		rt.Env = rt.Env[:len(rt.Env)-1]
		out := rt.OK("claim", "--agent", "other", "--json")
		if !strings.Contains(out, `"task":"t1"`) || !strings.Contains(out, "died") {
			t.Errorf("%v killed right after its claim: the next claim got %s; want t1, reaped as its holder died", args, out)
		}
	}
}

// A SIGKILLed run's task is not its holder's death while run's guard
// lives: the guard holds run's liveness anchor too, so the task is freed
// only once the guard has killed what the command left. Before, a guard
// that was stopped (or slow) let the task go at once while CMD's
// processes ran on beside the next holder (found from outside).
func TestRun_TaskHeldWhileItsGuardLives(t *testing.T) {
	for _, mode := range []string{containCgroup, containPgroup} {
		t.Run(mode, func(t *testing.T) {
			rt, run, _, pids, guard := startGuardedRun(t, mode)
			if err := syscall.Kill(guard, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			cont := func() { _ = syscall.Kill(guard, syscall.SIGCONT) }
			defer cont()
			run.Process.Kill()
			clitest.WaitExit(t, run)
			if code, out := rt.Code("claim", "--agent", "other"); code != exitNotAvailable {
				t.Fatalf("claim while run's guard lives (stopped): exit %d, want 4 (the task still held)\n%s", code, out)
			}
			cont()
			deadline := time.Now().Add(20 * time.Second)
			for {
				code, out := rt.Code("claim", "--agent", "other", "--json")
				if code == 0 {
					if !strings.Contains(out, `"task":"t1"`) {
						t.Fatalf("claim after the guard: %s", out)
					}
					break
				}
				if code != exitNotAvailable || time.Now().After(deadline) {
					t.Fatalf("claim after the guard went on: exit %d\n%s", code, out)
				}
				time.Sleep(20 * time.Millisecond)
			}
			escape := map[string]bool{}
			if mode == containPgroup {
				escape = map[string]bool{"setsid": true, "daemon": true} // pgroup's documented limit
			}
			clitest.WaitDead(t, pids, escape)
		})
	}
}
