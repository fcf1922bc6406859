//go:build fencetest

package torture

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// Torture part: process trees under `fencectl run`. Every task's command
// starts a background child, a setsid child and a double-forked daemon;
// each task's first run ends one way — the command exits 0 or 1, the
// lease is revoked, or run is killed with SIGKILL — and, if the task is
// not done, a second run completes it. Under each containment the machine
// allows, no process may outlive the run of its task (the weakest,
// pgroup, documents that a setsid child escapes a SIGKILL of run), and no
// task may be run again while a process of an earlier run lives, nor
// completed twice.

func TestTorture_ProcessTrees(t *testing.T) {
	perMode := tortureScale(4, 40)
	metrics := map[string]any{}
	var modes []string
	runs, checked, escaped := 0, 0, 0
	for _, mode := range clitest.Containments {
		t.Run(mode, func(t *testing.T) {
			rt := newRunTree(t)
			rt.Env = append(rt.Env, clitest.ContainEnv+"="+mode)
			clitest.RequireContainment(t, rt, mode)
			modes = append(modes, mode)
			scenarios := []string{"exit", "revoke", "sigkill", "fail"}
			for i := 0; i < perMode; i++ {
				id := fmt.Sprintf("t%03d", i)
				rt.OK("add", "--id", id)
				var earlier []map[string]int
				for attempt, how := range []string{scenarios[i%len(scenarios)], "exit"} {
					if attempt == 1 && rt.Show(id)["state"] == "done" {
						break
					}
					// Nothing of an earlier run of this task may live when
					// it runs again.
					for _, pids := range earlier {
						clitest.AssertDead(t, pids, pgroupEscapes(mode, "sigkill"))
					}
					pids, ok := tortTreeRun(t, rt, id, how)
					runs++
					checked += len(pids)
					if !ok {
						return
					}
					if mode == clitest.ContainPgroup && how == "sigkill" {
						escaped += 2
					}
					earlier = append(earlier, pids)
				}
				if st := rt.Show(id)["state"]; st != "done" {
					t.Errorf("%s is %v after its runs, want done", id, st)
				}
			}
			// No task completed twice; the tree is consistent.
			log := rt.OK("log", "--json")
			for i := 0; i < perMode; i++ {
				id := fmt.Sprintf(`"task":"t%03d"`, i)
				n := 0
				for _, line := range strings.Split(log, "\n") {
					if strings.Contains(line, id) && strings.Contains(line, `"type":"complete"`) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("t%03d completed %d times", i, n)
				}
			}
			rt.OK("replay", "--check")
		})
	}
	metrics["clitest.Containments"] = strings.Join(modes, "+")
	metrics["runs"], metrics["processes_checked"], metrics["escaped_pgroup_sigkill"] = runs, checked, escaped
	tortureReport(t, "process_trees", metrics)
}

// pgroupEscapes are the processes the pgroup containment cannot stop when
// run is killed with SIGKILL (documented).
func pgroupEscapes(mode, how string) map[string]bool {
	if mode == clitest.ContainPgroup && how == "sigkill" {
		return map[string]bool{"setsid": true, "daemon": true}
	}
	return nil
}

// tortTreeRun runs task id once under a process tree, ending it as how
// says, and checks that nothing of it outlives the run. It returns the
// tree's pids.
func tortTreeRun(t *testing.T, rt *runTree, id, how string) (map[string]int, bool) {
	t.Helper()
	marks := t.TempDir()
	then := map[string]string{
		"exit": "exit 0", "fail": "exit 1",
		"revoke": "while :; do sleep 0.01; done", "sigkill": "while :; do sleep 0.01; done",
	}[how]
	run, out := rt.StartRun(id, "--ttl", "30s", "--", "sh", "-c", clitest.TreeScript(marks, then))
	pids := clitest.TreePids(t, marks)
	want := map[string]int{"exit": 0, "fail": 1, "revoke": clitest.ExitFenced}
	switch how {
	case "revoke":
		rt.OK("revoke", id)
	case "sigkill":
		run.Process.Kill()
		clitest.WaitExit(t, run)
		clitest.WaitDead(t, pids, pgroupEscapes(rtMode(rt), how))
		rt.Advance(31 * time.Second) // the lease runs out: the next claim reaps it
		return pids, !t.Failed()
	}
	if code := clitest.WaitExit(t, run); code != want[how] {
		t.Errorf("run of %s (%s) exited %d, want %d\n%s", id, how, code, want[how], out)
	}
	// run ends only after everything of the task is dead.
	clitest.AssertDead(t, pids, nil)
	if _, err := os.Stat(filepath.Join(marks, "cmd")); err != nil {
		t.Errorf("the command of %s never started: %v", id, err)
	}
	return pids, !t.Failed()
}

// rtMode is the containment forced on rt's processes.
func rtMode(rt *runTree) string {
	for _, e := range rt.Env {
		if m, ok := strings.CutPrefix(e, clitest.ContainEnv+"="); ok {
			return m
		}
	}
	return ""
}
