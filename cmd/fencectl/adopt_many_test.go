package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdopt_ManyAtOnce drops more files into inbox/ than one etcd
// transaction takes (etcd's --max-txn-ops, 128 by default) and checks that
// one writer adopts them all, on every backend: the adoption is split
// until each commit fits, instead of failing, putting the files back and
// failing again at every later writer. (No more than one writer adopts at
// once: TestAdopt_BoundedPerWriter.)
func TestAdopt_ManyAtOnce(t *testing.T) {
	const tasks = 250
	for _, b := range scriptBackends {
		if b.front {
			continue // reap and status: the front hands them on, to what bolt runs
		}
		t.Run(b.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "tree")
			run := fencectlOn(t, dir, b.start(t)())
			dropInInbox(t, dir, tasks)
			if out := run("reap"); strings.Contains(out, "not committed") {
				t.Errorf("reap adopting %d files warned:\n%s", tasks, out)
			}
			var st struct {
				Counts map[string]int `json:"counts"`
			}
			if out := run("status", "--json"); json.Unmarshal([]byte(out), &st) != nil || st.Counts["available"] != tasks {
				t.Fatalf("after adopting %d files, status says %s", tasks, out)
			}
			for sub, want := range map[string]int{"inbox": 0, "available": tasks} {
				if entries, _ := os.ReadDir(filepath.Join(dir, sub)); len(entries) != want {
					t.Errorf("%s/ holds %d files, want %d", sub, len(entries), want)
				}
			}
		})
	}
}

// TestAdopt_BoundedPerWriter: a writer adopts at most adoptPerTurn files
// while it holds the lock, and says more are left; the writers after it
// adopt the rest. All at once, a drop of a million files kept every other
// writer out for minutes and, through the daemon, ran it out of
// descriptors (found from outside).
func TestAdopt_BoundedPerWriter(t *testing.T) {
	const tasks, perTurn = 600, 256
	dir := filepath.Join(t.TempDir(), "tree")
	run := fencectlOn(t, dir, map[string]string{"FENCE_DAEMON": "off"})
	dropInInbox(t, dir, tasks)
	available := func() int {
		entries, _ := os.ReadDir(filepath.Join(dir, "available"))
		return len(entries)
	}
	out := run("claim", "--agent", "a")
	if !strings.Contains(out, "inbox/ holds more files than a command adopts at once") {
		t.Errorf("the first writer does not say more files are left:\n%s", out)
	}
	if n := available(); n != perTurn-1 {
		t.Errorf("after one claim, %d tasks available, want %d (one turn's adoption, less the claim)", n, perTurn-1)
	}
	run("reap")
	run("reap")
	if n := available(); n != tasks-1 {
		t.Errorf("after three writers, %d tasks available, want %d", n, tasks-1)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "inbox")); len(entries) != 0 {
		t.Errorf("inbox/ still holds %d files", len(entries))
	}
}

// fencectlOn returns a runner of fencectl on the tree dir, made there by
// init, with env added to its environment; each run must exit 0, and
// returns stdout and stderr together.
func fencectlOn(t *testing.T, dir string, env map[string]string) func(args ...string) string {
	run := func(args ...string) string {
		t.Helper()
		c := fencectlCmd(dir, args...)
		for k, v := range env {
			c.Env = append(c.Env, k+"="+v)
		}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("init")
	return run
}

// dropInInbox drops n empty files, t0000 on, into dir's inbox/.
func dropInInbox(t *testing.T, dir string, n int) {
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(dir, "inbox", fmt.Sprintf("t%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
