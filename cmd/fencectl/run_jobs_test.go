package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// run --loop --jobs N: tasks side by side in one process, each contained
// apart from the others.

// Four jobs run four tasks at once: each command waits until four have
// started (bounded: it fails after 10 s), which only tasks running side
// by side can reach. Each of twelve tasks runs once and is completed.
func TestRun_JobsRunTasksSideBySide(t *testing.T) {
	rt := newRunTree(t)
	for i := range 12 {
		rt.OK("add", "--id", fmt.Sprintf("t%02d", i))
	}
	marks := t.TempDir()
	script := `echo "$FENCE_TASK $FENCE_TOKEN" >> ` + marks + `/ran
touch ` + marks + `/started.$FENCE_TASK
i=0
while [ "$(ls ` + marks + ` | grep -c '^started')" -lt 4 ]; do
	i=$((i+1)); [ $i -gt 1000 ] && exit 9; sleep 0.01
done`
	run, out := rt.StartRun("--loop", "--jobs", "4", "--agent", "pool", "--", "sh", "-c", script)
	if code := clitest.WaitExit(t, run); code != 0 {
		t.Fatalf("run --jobs 4 exited %d, want 0\n%s", code, out)
	}
	b, err := os.ReadFile(filepath.Join(marks, "ran"))
	if err != nil {
		t.Fatal(err)
	}
	tasks, tokens := map[string]int{}, map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		tasks[f[0]]++
		tokens[f[1]] = true
	}
	for i := range 12 {
		id := fmt.Sprintf("t%02d", i)
		if tasks[id] != 1 {
			t.Errorf("task %s ran %d times, want once", id, tasks[id])
		}
		if st := rt.Show(id)["state"]; st != "done" {
			t.Errorf("task %s is %v, want done", id, st)
		}
	}
	if len(tokens) != 12 {
		t.Errorf("12 tasks ran under %d distinct tokens, want 12", len(tokens))
	}
	rt.OK("replay", "--check")
}

// What one task's command leaves behind is killed when that task ends,
// and nothing of a task running beside it: "quick" leaves a background
// child, a setsid child and a daemon and exits once "slow" has started;
// "slow" runs on until the test has seen quick's processes dead, and is
// then completed, not killed.
func TestRun_JobsKillOnlyTheirOwnTasksProcesses(t *testing.T) {
	for _, mode := range []string{containCgroup, containPidns} {
		t.Run(mode, func(t *testing.T) {
			rt := newRunTree(t)
			rt.Env = append(rt.Env, containEnv+"="+mode)
			clitest.RequireContainment(t, rt, mode)
			rt.OK("add", "--id", "quick")
			rt.OK("add", "--id", "slow")
			marks := t.TempDir()
			waitSlow := `i=0; while [ ! -e ` + marks + `/slow-started ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 9; sleep 0.01; done; exit 0`
			script := `case $FENCE_TASK in
quick) ` + strings.ReplaceAll(clitest.TreeScript(marks, waitSlow), "\n", "\n\t") + ` ;;
slow) echo x >> ` + marks + `/slow-runs; touch ` + marks + `/slow-started; while [ ! -e ` + marks + `/go ]; do sleep 0.01; done ;;
esac`
			run, out := rt.StartRun("--loop", "--jobs", "2", "--json", "--agent", "pool", "--", "sh", "-c", script)
			pids := clitest.TreePids(t, marks)
			waitFor(t, "quick to be done", func() bool { return rt.Show("quick")["state"] == "done" })
			clitest.AssertDead(t, pids, nil)
			if err := os.WriteFile(filepath.Join(marks, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if code := clitest.WaitExit(t, run); code != 0 {
				t.Fatalf("run --jobs 2 exited %d, want 0\n%s", code, out)
			}
			if m := rt.Show("slow"); m["state"] != "done" || m["attempts"].(float64) != 0 {
				t.Errorf("slow is %v after %v failed attempts, want done at the first: the end of quick must not touch it\n%s", m["state"], m["attempts"], out)
			}
			if b, _ := os.ReadFile(filepath.Join(marks, "slow-runs")); string(b) != "x\n" {
				t.Errorf("slow ran %d times, want once", strings.Count(string(b), "x"))
			}
			if !strings.Contains(out.String(), `"containment":"`+mode+`"`) {
				t.Errorf("run --json does not name the containment %s:\n%s", mode, out)
			}
		})
	}
}

// A signal reaches every job's command; each task is released, not
// failed, and run exits with a command's status. SIGKILL of run takes
// every job's process tree with it.
func TestRun_JobsSignalAndKill(t *testing.T) {
	t.Run("sigint", func(t *testing.T) {
		rt := newRunTree(t)
		for _, id := range []string{"a", "b", "c"} {
			rt.OK("add", "--id", id)
		}
		marks := t.TempDir()
		run, out := rt.StartRun("--loop", "--jobs", "3", "--agent", "pool", "--", "sh", "-c",
			`trap 'touch `+marks+`/int.$FENCE_TASK; exit 130' INT; touch `+marks+`/up.$FENCE_TASK; while :; do sleep 0.01; done`)
		for _, id := range []string{"a", "b", "c"} {
			waitFor(t, "the command of "+id+" to start", func() bool { _, err := os.Stat(marks + "/up." + id); return err == nil })
		}
		if err := run.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := clitest.WaitExit(t, run); code != 130 {
			t.Fatalf("run --jobs 3 after SIGINT exited %d, want 130\n%s", code, out)
		}
		for _, id := range []string{"a", "b", "c"} {
			if _, err := os.Stat(marks + "/int." + id); err != nil {
				t.Errorf("the command of %s did not get SIGINT", id)
			}
			m := rt.Show(id)
			if m["state"] != "available" || m["attempts"].(float64) != 0 {
				t.Errorf("%s after SIGINT: %v with %v attempts, want available with 0 (released)", id, m["state"], m["attempts"])
			}
		}
	})
	for _, mode := range []string{containCgroup, containPidns} {
		t.Run("sigkill/"+mode, func(t *testing.T) {
			rt := newRunTree(t)
			rt.Env = append(rt.Env, containEnv+"="+mode)
			clitest.RequireContainment(t, rt, mode)
			rt.OK("add", "--id", "a")
			rt.OK("add", "--id", "b")
			ma, mb := t.TempDir(), t.TempDir()
			script := `case $FENCE_TASK in
a) ` + strings.ReplaceAll(clitest.TreeScript(ma, "while :; do sleep 0.01; done"), "\n", "\n\t") + ` ;;
b) ` + strings.ReplaceAll(clitest.TreeScript(mb, "while :; do sleep 0.01; done"), "\n", "\n\t") + ` ;;
esac`
			run, _ := rt.StartRun("--loop", "--jobs", "2", "--agent", "pool", "--", "sh", "-c", script)
			pa, pb := clitest.TreePids(t, ma), clitest.TreePids(t, mb)
			run.Process.Kill()
			clitest.WaitExit(t, run)
			clitest.WaitDead(t, pa, nil)
			clitest.WaitDead(t, pb, nil)
		})
	}
}

// A command that cannot be started ends run, with exit 127, even while
// the other jobs wait for a task (--wait): their waits end at once, before
// the task is released, so that none of them claims it again.
// Here the command removes itself after its first task, so the next task
// cannot be started.
func TestRun_JobsStartErrorEndsTheWaitingJobs(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	self := filepath.Join(marks, "once.sh")
	if err := os.WriteFile(self, []byte("#!/bin/sh\nrm -f \"$0\"\ntouch "+marks+"/ran.$FENCE_TASK\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run, out := rt.StartRun("--loop", "--jobs", "3", "--wait", "1h", "--agent", "pool", "--", self)
	waitFor(t, "t1 to be done", func() bool { return rt.Show("t1")["state"] == "done" })
	rt.OK("add", "--id", "t2")
	if code := clitest.WaitExit(t, run); code != exitNoCommand {
		t.Fatalf("run --jobs 3 exited %d, want 127\n%s", code, out)
	}
	if n := strings.Count(out.String(), `cannot start "`+self+`"`); n != 1 {
		t.Errorf("run says %d times that the command could not be started, want once: the other jobs stop instead of trying\n%s", n, out)
	}
	if n := strings.Count(rt.OK("log", "--task", "t2", "--json"), `"type":"claim"`); n != 1 {
		t.Errorf("t2 was claimed %d times, want once: once a command cannot be started, no job claims more", n)
	}
	m := rt.Show("t2")
	if m["state"] != "available" || m["attempts"].(float64) != 0 {
		t.Errorf("t2: %v with %v attempts, want available with 0 (released)", m["state"], m["attempts"])
	}
}

// A lease lost under one job stops that job's command only: the task
// beside it runs on and is completed, and run exits 0 at the end.
func TestRun_JobsLostLeaseEndsOneTaskOnly(t *testing.T) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "a")
	rt.OK("add", "--id", "b")
	marks := t.TempDir()
	run, out := rt.StartRun("--loop", "--jobs", "2", "--agent", "pool", "--", "sh", "-c",
		`trap 'echo term >> `+marks+`/$FENCE_TASK; exit 143' TERM
`+clitest.HostPid(marks+"/pid.$FENCE_TASK")+`
touch `+marks+`/up.$FENCE_TASK
while [ ! -e `+marks+`/go ]; do sleep 0.01; done
echo ran >> `+marks+`/$FENCE_TASK`)
	for _, id := range []string{"a", "b"} {
		waitFor(t, "the command of "+id+" to start", func() bool { _, err := os.Stat(marks + "/up." + id); return err == nil })
	}
	pidA, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid.a"))
	rt.OK("cancel", "a", "--reason", "operator")
	// A lost lease kills at once: no grace, no trap run.
	waitFor(t, "a's command to be killed", func() bool { return !clitest.Alive(pidA) })
	if err := os.WriteFile(filepath.Join(marks, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := clitest.WaitExit(t, run); code != 0 {
		t.Fatalf("run --jobs 2 exited %d, want 0\n%s", code, out)
	}
	if b, _ := os.ReadFile(marks + "/a"); strings.Contains(string(b), "ran") {
		t.Errorf("a's command ran on after its lease was lost: %q", b)
	}
	if b, _ := os.ReadFile(marks + "/b"); string(b) != "ran\n" {
		t.Errorf("b's command: %q, want it to have run to its end, untouched", b)
	}
	if st := rt.Show("b")["state"]; st != "done" {
		t.Errorf("b is %v, want done", st)
	}
	if !strings.Contains(out.String(), "a token ") || !strings.Contains(out.String(), "lease lost") {
		t.Errorf("run does not report a's lost lease:\n%s", out)
	}
}
