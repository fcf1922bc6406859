package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// Nothing CMD starts may outlive its task: a background child, a setsid
// child and a double-forked daemon, whichever way the task ends (CMD
// exits, the lease is revoked, run is killed with SIGKILL), under each
// containment run can use.

func TestRun_NothingOutlivesTheTask(t *testing.T) {
	for _, mode := range clitest.Containments {
		t.Run(mode+"/command-exits", func(t *testing.T) {
			rt := newRunTree(t)
			rt.Env = append(rt.Env, containEnv+"="+mode)
			clitest.RequireContainment(t, rt, mode)
			rt.OK("add", "--id", "t1")
			marks := t.TempDir()
			run, out := rt.StartRun("t1", "--json", "--", "sh", "-c", clitest.TreeScript(marks, "exit 0"))
			pids := clitest.TreePids(t, marks)
			if code := clitest.WaitExit(t, run); code != 0 {
				t.Fatalf("run exited %d, want 0\n%s", code, out)
			}
			clitest.AssertDead(t, pids, nil)
			if !strings.Contains(out.String(), `"containment":"`+mode+`"`) {
				t.Errorf("run --json does not name the containment %s:\n%s", mode, out)
			}
			if st := rt.Show("t1")["state"]; st != "done" {
				t.Errorf("task is %v, want done", st)
			}
		})
		t.Run(mode+"/revoke", func(t *testing.T) {
			rt, run, out, pids := startTreeRun(t, mode)
			rt.OK("revoke", "t1")
			if code := clitest.WaitExit(t, run); code != exitFenced {
				t.Fatalf("run exited %d, want 3\n%s", code, out)
			}
			clitest.AssertDead(t, pids, nil)
		})
		t.Run(mode+"/sigkill-of-run", func(t *testing.T) {
			rt := newRunTree(t)
			rt.Env = append(rt.Env, containEnv+"="+mode)
			clitest.RequireContainment(t, rt, mode)
			rt.OK("add", "--id", "t1")
			marks := t.TempDir()
			run, _ := rt.StartRun("t1", "--", "sh", "-c", clitest.TreeScript(marks, "while :; do sleep 0.01; done"))
			pids := clitest.TreePids(t, marks)
			run.Process.Kill()
			clitest.WaitExit(t, run)
			var escape map[string]bool
			if mode == containPgroup {
				// The documented limit of the weakest containment: a
				// setsid child leaves the process group.
				escape = map[string]bool{"setsid": true, "daemon": true}
			}
			clitest.WaitDead(t, pids, escape)
		})
	}
}

// TestClitest_ConstantsAreTheBinarys keeps clitest's copies of the exit
// codes and the containment names (it cannot import package main) equal
// to the ones fencectl uses.
func TestClitest_ConstantsAreTheBinarys(t *testing.T) {
	pairs := []struct {
		name        string
		own, mirror any
	}{
		{"exitOK", exitOK, clitest.ExitOK}, {"exitError", exitError, clitest.ExitError},
		{"exitUsage", exitUsage, clitest.ExitUsage}, {"exitFenced", exitFenced, clitest.ExitFenced},
		{"exitNotAvailable", exitNotAvailable, clitest.ExitNotAvailable}, {"exitBusy", exitBusy, clitest.ExitBusy},
		{"exitNoSuchTask", exitNoSuchTask, clitest.ExitNoSuchTask}, {"exitDrift", exitDrift, clitest.ExitDrift},
		{"containEnv", containEnv, clitest.ContainEnv}, {"containCgroup", containCgroup, clitest.ContainCgroup},
		{"containPidns", containPidns, clitest.ContainPidns}, {"containPgroup", containPgroup, clitest.ContainPgroup},
	}
	for _, p := range pairs {
		if p.own != p.mirror {
			t.Errorf("%s is %v, clitest has %v", p.name, p.own, p.mirror)
		}
	}
}

// Under cgroup containment, run --loop keeps a task's cgroup for the next
// task when nothing was left in it (making, killing and removing one per
// task was a third of a no-op task's cost), and makes a fresh one after a
// task whose leftovers it killed: a cgroup killed through cgroup.kill may
// kill what is later cloned into it.
func TestRun_LoopReusesOnlyCleanCgroups(t *testing.T) {
	rt := newRunTree(t)
	rt.Env = append(rt.Env, containEnv+"="+containCgroup)
	clitest.RequireContainment(t, rt, containCgroup)
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		rt.OK("add", "--id", id)
	}
	marks := t.TempDir()
	// Each task records its cgroup; t2 leaves a child behind.
	script := `echo "$FENCE_TASK $(grep '^0::' /proc/self/cgroup)" >> ` + marks + `/cg; ` +
		`if [ "$FENCE_TASK" = t2 ]; then sleep 300 & fi`
	code, out := rt.Code("run", "--loop", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("run --loop exited %d\n%s", code, out)
	}
	if !strings.Contains(out, "the command left 1 process behind, now killed") {
		t.Errorf("run does not say it killed t2's child:\n%s", out)
	}
	b, err := os.ReadFile(marks + "/cg")
	if err != nil {
		t.Fatal(err)
	}
	cg := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, path, _ := strings.Cut(line, " ")
		cg[id] = path
	}
	if len(cg) != 4 || cg["t1"] == "" {
		t.Fatalf("cgroups recorded: %q", b)
	}
	if cg["t1"] != cg["t2"] {
		t.Errorf("t2 ran in %s, not in t1's clean cgroup %s", cg["t2"], cg["t1"])
	}
	if cg["t3"] == cg["t2"] {
		t.Errorf("t3 ran in %s, the cgroup whose leftovers were killed", cg["t3"])
	}
	if cg["t4"] != cg["t3"] {
		t.Errorf("t4 ran in %s, not in t3's clean cgroup %s", cg["t4"], cg["t3"])
	}
}

// The guard is not run's child (it is started through a middle process
// that exits): while CMD runs, CMD is run's only child, so that once CMD
// is waited for, one waitid tells run whether CMD left anything behind,
// without a scan of /proc.
func TestRun_GuardIsNotRunsChild(t *testing.T) {
	for _, mode := range []string{containCgroup, containPgroup} {
		t.Run(mode, func(t *testing.T) {
			rt := newRunTree(t)
			rt.Env = append(rt.Env, containEnv+"="+mode)
			clitest.RequireContainment(t, rt, mode)
			rt.OK("add", "--id", "t1")
			marks := t.TempDir()
			// Count the processes whose parent is run ($PPID), CMD included.
			script := `n=0; for s in /proc/[0-9]*/stat; do read -r line < "$s" 2>/dev/null || continue; ` +
				`set -- ${line##*) }; [ "$2" = "$PPID" ] && n=$((n+1)); done; echo "$n" > ` + marks + `/children`
			if code, out := rt.Code("run", "t1", "--", "sh", "-c", script); code != 0 {
				t.Fatalf("run exited %d\n%s", code, out)
			}
			if n := clitest.WaitFile(t, marks+"/children"); n != "1" {
				t.Errorf("run had %s children while CMD ran, want 1 (CMD alone)", n)
			}
		})
	}
}

// A guard that dies while run goes on (killed by hand, by the OOM
// killer) is replaced: a SIGKILL of run afterwards still kills
// everything CMD started (in pgroup mode, its process group).
func TestRun_DeadGuardIsReplaced(t *testing.T) {
	for _, mode := range []string{containCgroup, containPgroup} {
		t.Run(mode, func(t *testing.T) {
			_, run, out, pids, guard := startGuardedRun(t, mode)
			first := []int{guard}
			if err := syscall.Kill(first[0], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			var g []int
			deadline := time.Now().Add(20 * time.Second)
			for g = guardsOf(run.Process.Pid); len(g) != 1 || g[0] == first[0]; g = guardsOf(run.Process.Pid) {
				if time.Now().After(deadline) {
					t.Fatalf("no new guard after guard %d was killed: guards %v\nrun said:\n%s", first[0], g, out)
				}
				time.Sleep(10 * time.Millisecond)
			}
			run.Process.Kill()
			clitest.WaitExit(t, run)
			escape := map[string]bool{}
			if mode == containPgroup {
				escape = map[string]bool{"setsid": true, "daemon": true} // pgroup's documented limit
			}
			clitest.WaitDead(t, pids, escape)
		})
	}
}

// startTreeRun starts `run t1` with containment mode on a new tree, CMD
// a tree of processes (clitest.TreeScript), and returns the tree, run and
// its output, and the tree's pids.
func startTreeRun(t *testing.T, mode string) (*runTree, *exec.Cmd, *strings.Builder, map[string]int) {
	t.Helper()
	rt := newRunTree(t)
	rt.Env = append(rt.Env, containEnv+"="+mode)
	clitest.RequireContainment(t, rt, mode)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	run, out := rt.StartRun("t1", "--", "sh", "-c", clitest.TreeScript(marks, "while :; do sleep 0.01; done"))
	return rt, run, out, clitest.TreePids(t, marks)
}

// startGuardedRun is startTreeRun, and returns run's one guard too.
func startGuardedRun(t *testing.T, mode string) (*runTree, *exec.Cmd, *strings.Builder, map[string]int, int) {
	t.Helper()
	rt, run, out, pids := startTreeRun(t, mode)
	guards := guardsOf(run.Process.Pid)
	if len(guards) != 1 {
		t.Fatalf("%d guards for run (pid %d), want 1", len(guards), run.Process.Pid)
	}
	return rt, run, out, pids, guards[0]
}

// guardsOf lists the live guards of the run with pid runPid: processes
// whose environment names the guard mode (FENCECTL_RUN_GUARD) and whose
// cgroup directory (cgroup mode) or process group (pgroup mode: the
// guard's "-") was made for that run, found by the guard's pipe from run.
func guardsOf(runPid int) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !clitest.Alive(pid) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains(string(env), guardEnv+"=") || strings.Contains(string(env), guardSpawnEnv+"=") {
			continue
		}
		// The guard holds the read end of a pipe whose write end run
		// holds: the same pipe inode among both processes' descriptors.
		if sharesPipe(pid, runPid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sharesPipe reports whether processes a and b have a pipe in common.
func sharesPipe(a, b int) bool {
	pipes := func(pid int) map[string]bool {
		m := map[string]bool{}
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
				m[l] = true
			}
		}
		return m
	}
	pb := pipes(b)
	for p := range pipes(a) {
		if pb[p] {
			return true
		}
	}
	return false
}
