package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// TestReplay_EtcdBesideWriters runs replay again and again on an etcd tree
// while agents claim and complete (writers that do not take turns): replay
// plans its moves from a log it read before, and the directories it
// scanned may show a file twice, in the two places a writer moved it
// between. Found from outside: replay moved claimed files back (agents
// were handed a task file that was not there), and set completed tasks'
// files aside as second copies (then settled as missing, lost from done/).
// A task that changed after replay read the log is the writer's now.
func TestReplay_EtcdBesideWriters(t *testing.T) {
	dt := newDaemonTree(t, clitest.Etcd(t), 0)
	dt.env = append(dt.env, "FENCE_DAEMON=off")
	const tasks = 240
	for i := range tasks {
		if err := os.WriteFile(filepath.Join(dt.dir, "inbox", fmt.Sprintf("s%03d", i)), []byte("w\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dt.ok(dt.cmd("reap")) // adopts the inbox
	var stop atomic.Bool
	var mu sync.Mutex
	var gone []string // tasks whose claim named a file that was not there
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				code, out, _ := dt.run(dt.cmd("claim", "--agent", fmt.Sprint("w", w), "--format", "env"))
				if code == exitNotAvailable {
					return // nothing left
				}
				if code != 0 {
					continue
				}
				env := map[string]string{}
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					k, v, _ := strings.Cut(line, "=")
					env[k] = strings.Trim(v, "'")
				}
				if _, err := os.Stat(env["FENCE_TASK_FILE"]); err != nil {
					mu.Lock()
					gone = append(gone, env["FENCE_TASK"])
					mu.Unlock()
				}
				dt.run(dt.cmd("complete", env["FENCE_TASK"], "--token", env["FENCE_TOKEN"]))
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				dt.run(dt.cmd("replay"))
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(dt.ok(dt.cmd("status", "--json")), `"available":0,`) {
		time.Sleep(100 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if len(gone) > 0 {
		t.Errorf("%d claims named a task file that was not there (replay moved it): %v", len(gone), gone)
	}
	if n := strings.Count(dt.ok(dt.cmd("log", "--json", "--limit", "0")), `"type":"missing"`); n > 0 {
		t.Errorf("%d tasks settled as missing", n)
	}
	if q, _ := os.ReadDir(filepath.Join(dt.dir, ".fence", "quarantine")); len(q) > 0 {
		t.Errorf("replay set %d files aside: %v", len(q), q)
	}
	dt.ok(dt.cmd("replay", "--check"))
}
