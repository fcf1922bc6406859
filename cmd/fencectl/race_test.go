package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// fencectlBin is this test binary acting as fencectl (see TestMain).
var fencectlBin = clitest.Binary{Path: os.Args[0], Env: []string{"FENCECTL_AS_MAIN=1"}}

// fencectlCmd runs the test binary as fencectl in its own process.
func fencectlCmd(dir string, args ...string) *exec.Cmd { return fencectlBin.Command(dir, args...) }

// raceTasks is the race's size on each backend: an etcd claim is a few
// round trips to the cluster and reruns on conflict, so its row is smaller
// to keep make test fast.
var raceTasks = map[string]int{"bolt": 500, "etcd": 150, "front": 500, "front-etcd": 150}

// TestRace_ProcessesClaimAndComplete runs 8 processes of the real binary
// that claim and complete a batch of tasks concurrently, on every journal
// backend (scriptBackends), then checks that every task is done exactly
// once, the log has one completion per task, and the claim tokens in the
// log strictly increase.
func TestRace_ProcessesClaimAndComplete(t *testing.T) {
	for _, b := range scriptBackends {
		t.Run(b.name, func(t *testing.T) {
			env := b.start(t)()
			bin := b.binary(t)
			testRaceProcesses(t, raceTasks[b.name], func(dir string, args ...string) *exec.Cmd {
				c := bin.Command(dir, args...)
				for k, v := range env {
					c.Env = append(c.Env, k+"="+v)
				}
				return c
			})
		})
	}
}

// noRepairs fails a command of a race in which nothing crashed that
// says it repaired the tree ("settled": finished a move, moved a file
// back): there was nothing to repair, so such a move was one process
// acting on a stale view of another's work. On etcd, claims that lost a
// race for a task used to move the winner's file back to available/.
func noRepairs(what, output string) error {
	if strings.Contains(output, "settled") {
		return fmt.Errorf("%s repaired a tree nobody broke:\n%s", what, output)
	}
	return nil
}

func testRaceProcesses(t *testing.T, tasks int, fencectlCmd func(dir string, args ...string) *exec.Cmd) {
	const agents = 8
	if tasks == 0 {
		t.Fatal("no race size for this backend: add it to raceTasks")
	}
	dir := filepath.Join(t.TempDir(), "tree")
	if out, err := fencectlCmd(dir, "init").CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	// Adopt the batch through the inbox: one process instead of 500.
	for i := 0; i < tasks; i++ {
		if err := os.WriteFile(filepath.Join(dir, "inbox", fmt.Sprintf("t%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := fencectlCmd(dir, "reap").CombinedOutput(); err != nil {
		t.Fatalf("adopt: %v\n%s", err, out)
	}

	start := time.Now()
	var mu sync.Mutex
	granted := map[uint64]string{}
	completed := map[string]int{}
	errs := make(chan error, agents)
	var wg sync.WaitGroup
	for a := 0; a < agents; a++ {
		wg.Add(1)
		go func(agent string) {
			defer wg.Done()
			for {
				claim := fencectlCmd(dir, "claim", "--json", "--agent", agent)
				var stderr bytes.Buffer
				claim.Stderr = &stderr
				out, err := claim.Output()
				// --json puts a successful claim's notices in its output.
				if err := noRepairs(agent+" claim", string(out)+stderr.String()); err != nil {
					errs <- err
					return
				}
				if clitest.ExitCode(err) == exitNotAvailable {
					errs <- nil
					return
				}
				if err != nil {
					errs <- fmt.Errorf("%s claim: %v", agent, err)
					return
				}
				var c struct {
					Task  string `json:"task"`
					Token uint64 `json:"token"`
				}
				if err := json.Unmarshal(out, &c); err != nil {
					errs <- fmt.Errorf("%s claim output %q: %v", agent, out, err)
					return
				}
				mu.Lock()
				if prev, dup := granted[c.Token]; dup {
					mu.Unlock()
					errs <- fmt.Errorf("token %d granted twice (%s and %s)", c.Token, prev, c.Task)
					return
				}
				granted[c.Token] = c.Task
				mu.Unlock()
				out, err = fencectlCmd(dir, "complete", c.Task, "--token", fmt.Sprint(c.Token), "--agent", agent).CombinedOutput()
				if err != nil {
					errs <- fmt.Errorf("%s complete %s: %v\n%s", agent, c.Task, err, out)
					return
				}
				if err := noRepairs(agent+" complete "+c.Task, string(out)); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				completed[c.Task]++
				mu.Unlock()
			}
		}(fmt.Sprintf("agent-%d", a))
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d processes: %d claims + completes in %s (%.0f claims/s)", agents, tasks, elapsed.Round(time.Millisecond), float64(tasks)/elapsed.Seconds())

	if len(completed) != tasks {
		t.Fatalf("%d tasks completed, want %d", len(completed), tasks)
	}
	for task, n := range completed {
		if n != 1 {
			t.Errorf("task %s completed %d times by agents", task, n)
		}
	}
	for sub, want := range map[string]int{"available": 0, "claimed": 0, "done": tasks, "inbox": 0} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != want {
			t.Errorf("%s/ holds %d files, want %d", sub, len(entries), want)
		}
	}

	out, err := fencectlCmd(dir, "log", "--json").Output()
	if err != nil {
		t.Fatalf("log: %v", err)
	}
	completes := map[string]int{}
	var lastToken uint64
	claims := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var ev struct {
			Type  string `json:"type"`
			Task  string `json:"task"`
			Token uint64 `json:"token"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "claim":
			claims++
			if ev.Token <= lastToken {
				t.Errorf("claim token %d does not increase (previous %d)", ev.Token, lastToken)
			}
			lastToken = ev.Token
		case "complete":
			completes[ev.Task]++
		}
	}
	if claims != tasks {
		t.Errorf("log has %d claims, want %d (no lease expired, so one each)", claims, tasks)
	}
	for i := 0; i < tasks; i++ {
		if n := completes[fmt.Sprintf("t%04d", i)]; n != 1 {
			t.Errorf("log has %d completions of t%04d, want 1", n, i)
		}
	}
	if out, err := fencectlCmd(dir, "replay", "--check").CombinedOutput(); err != nil {
		t.Fatalf("replay --check: %v\n%s", err, out)
	}
}
