package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// mostHeld replays the tree's log and returns the most tasks agent held
// at once.
func mostHeld(t *testing.T, rt *clitest.RunTree, agent string) int {
	t.Helper()
	held := map[string]bool{}
	most := 0
	for line := range strings.Lines(rt.OK("log", "--json")) {
		var e struct{ Type, Task, Agent, To string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch {
		case e.Type == "claim" && e.Agent == agent:
			held[e.Task] = true
		case e.To != "claimed":
			delete(held, e.Task)
		}
		most = max(most, len(held))
	}
	return most
}

// pipelinedTree is a tree of t1, t2 and t3 whose run --loop always finds
// a core spare: after the short t1, t2 runs with t3 in hand.
func pipelinedTree(t *testing.T) *clitest.RunTree {
	rt := newRunTree(t)
	// Its tasks in hand are held however long the commands take to start
	// the processes they run.
	rt.Env = append(rt.Env, "FENCE_TEST_SPARE_CPU=yes", "FENCE_TEST_SHORT_BELOW=10s", "FENCE_TEST_HAND_BACK_AFTER=1h")
	for _, id := range []string{"t1", "t2", "t3"} {
		rt.OK("add", "--id", id)
	}
	return rt
}

// With a core to spare, run --loop keeps a second task in hand after a
// short command, and settles each task beside the next one's command;
// without, it claims a batch of tasks at once and completes them together
// (see batchSize). Either way every task is done once.
func TestRun_LoopPipelinesOnlyWithASpareCore(t *testing.T) {
	for _, tc := range []struct {
		spare string
		want  func(int) bool
		says  string
	}{
		{"yes", func(n int) bool { return n == 2 }, "2 (one running, one in hand)"},
		{"no", func(n int) bool { return n >= 2 && n <= maxBatch }, fmt.Sprintf("a batch of 2 to %d", maxBatch)},
	} {
		t.Run("spare="+tc.spare, func(t *testing.T) {
			rt := newRunTree(t)
			rt.Env = append(rt.Env, "FENCE_TEST_SPARE_CPU="+tc.spare, "FENCE_TEST_SHORT_BELOW=10s", "FENCE_TEST_HAND_BACK_AFTER=1h")
			for i := range 8 {
				rt.OK("add", "--id", fmt.Sprintf("t%d", i))
			}
			marks := t.TempDir()
			rt.OK("run", "--loop", "--agent", "looper", "--", "sh", "-c", "echo x >> "+marks+"/$FENCE_TASK")
			for i := range 8 {
				id := fmt.Sprintf("t%d", i)
				if st := rt.Show(id)["state"]; st != "done" {
					t.Errorf("%s is %v, want done", id, st)
				}
				if b, _ := os.ReadFile(filepath.Join(marks, id)); string(b) != "x\n" {
					t.Errorf("%s's command ran %d times, want once", id, strings.Count(string(b), "x"))
				}
			}
			if n := mostHeld(t, rt, "looper"); !tc.want(n) {
				t.Errorf("run held up to %d tasks at once, want %s", n, tc.says)
			}
		})
	}
}

// A task in hand whose lease is revoked while the command before it runs
// is never run under that lease: run sees the loss before starting its
// command, says so, and goes on; the task, handed back, is run again
// under a new token.
func TestRun_LoopTaskInHandRevokedIsNotRun(t *testing.T) {
	rt := pipelinedTree(t)
	marks := t.TempDir()
	// t1 is short, so t2 and t3 are claimed together; t2 revokes t3,
	// the task in hand.
	script := `echo "$FENCE_TOKEN" >> ` + marks + `/$FENCE_TASK; if [ "$FENCE_TASK" = t2 ]; then "$FC" revoke t3 --reason test >/dev/null; fi`
	out := rt.OK("run", "--loop", "--agent", "looper", "--", "sh", "-c", script)
	if !strings.Contains(out, "t3") || !strings.Contains(out, "lease lost before the command started") {
		t.Errorf("run did not report t3's lease lost before its command:\n%s", out)
	}
	if st := rt.Show("t3")["state"]; st != "done" {
		t.Errorf("t3 is %v, want done (run again after the revoke)", st)
	}
	b, _ := os.ReadFile(filepath.Join(marks, "t3"))
	if runs := strings.Fields(string(b)); len(runs) != 1 {
		t.Fatalf("t3's command ran %d times (tokens %q), want once", len(runs), runs)
	}
	// The run that happened was under the token claimed after the revoke.
	log := rt.OK("log", "--task", "t3", "--json")
	var claims []string
	for line := range strings.Lines(log) {
		var e struct {
			Type  string
			Token json.Number
		}
		if err := json.Unmarshal([]byte(line), &e); err == nil && e.Type == "claim" {
			claims = append(claims, e.Token.String())
		}
	}
	if len(claims) != 2 || strings.TrimSpace(string(b)) != claims[1] {
		t.Errorf("t3 ran under token %q; its claims were %q: want the second", strings.TrimSpace(string(b)), claims)
	}
}

// A signal while a task is in hand hands that task back too: nothing
// stays claimed by a run that has ended.
func TestRun_LoopSignalHandsBackTheTaskInHand(t *testing.T) {
	rt := pipelinedTree(t)
	marks := t.TempDir()
	script := `if [ "$FENCE_TASK" = t2 ]; then echo x > ` + marks + `/started; sleep 60; fi`
	run, out := rt.StartRun("--loop", "--agent", "looper", "--", "sh", "-c", script)
	clitest.WaitFile(t, marks+"/started")
	if st := rt.Show("t3")["state"]; st != "claimed" {
		t.Fatalf("t3 is %v while t2 runs, want claimed (in hand)", st)
	}
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := clitest.WaitExit(t, run); code != 130 {
		t.Fatalf("run --loop after SIGINT exited %d, want 130\n%s", code, out)
	}
	for id, want := range map[string]string{"t1": "done", "t2": "available", "t3": "available"} {
		if st := rt.Show(id)["state"]; st != want {
			t.Errorf("%s is %v after run ended, want %s\n%s", id, st, want, out)
		}
	}
	if log := rt.OK("log", "--task", "t3"); !strings.Contains(log, "before the command started") {
		t.Errorf("t3's release does not say why:\n%s", log)
	}
}
