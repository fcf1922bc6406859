//go:build fencetest

package torture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// Torture part 1, the kill storm: 8 agent loops of the real binary, a
// producer adding tasks, a reader, and a killer that SIGKILLs a random
// running fencectl process every 20–200 ms; some processes also carry a
// deliberate crash point. Afterwards the tree is repaired with `replay`,
// drained on a clock far in the future, and audited: every task in exactly
// one directory, none lost, the journal's own fencing history clean, no
// task completed twice, every acknowledged step in the journal.

// stormProcs runs fencectl processes and knows which are running, so the
// killer can pick one.
type stormProcs struct {
	mu   sync.Mutex
	live map[*exec.Cmd]struct{}

	started, killed, crashed atomic.Int64
}

type stormResult struct {
	code           int
	stdout, stderr string
	killed         bool // ended by SIGKILL
	crashed        bool // ended at a deliberate crash point (exit 99)
}

// interrupted reports whether the process did not finish by itself: its
// outcome is unknown.
func (r stormResult) interrupted() bool { return r.killed || r.crashed }

func (p *stormProcs) run(c *exec.Cmd) stormResult {
	var so, se bytes.Buffer
	c.Stdout, c.Stderr = &so, &se
	if err := c.Start(); err != nil {
		return stormResult{code: -1, stderr: err.Error()}
	}
	p.started.Add(1)
	p.mu.Lock()
	p.live[c] = struct{}{}
	p.mu.Unlock()
	err := c.Wait()
	p.mu.Lock()
	delete(p.live, c)
	p.mu.Unlock()
	r := stormResult{code: clitest.ExitCode(err), stdout: so.String(), stderr: se.String()}
	if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		r.killed = true
		p.killed.Add(1)
	}
	if r.code == 99 && strings.Contains(r.stderr, "test crash at") {
		r.crashed = true
		p.crashed.Add(1)
	}
	return r
}

// kill SIGKILLs one random running process; it reports whether a signal
// was sent.
func (p *stormProcs) kill(rng *rand.Rand) bool {
	p.mu.Lock()
	var pick *exec.Cmd
	if n := len(p.live); n > 0 {
		i := rng.IntN(n)
		for c := range p.live {
			if i == 0 {
				pick = c
				break
			}
			i--
		}
	}
	p.mu.Unlock()
	return pick != nil && pick.Process.Signal(syscall.SIGKILL) == nil
}

// stormStats counts outcomes per operation.
type stormStats struct {
	mu sync.Mutex
	m  map[string]*stormStat
}

type stormStat struct {
	Attempted   int `json:"attempted"`
	Succeeded   int `json:"succeeded"`
	Fenced      int `json:"fenced"`
	Nothing     int `json:"nothing_to_claim,omitempty"`
	Interrupted int `json:"interrupted"`
	Other       int `json:"other"`
}

func (s *stormStats) add(op string, r stormResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[op]
	if st == nil {
		st = &stormStat{}
		s.m[op] = st
	}
	st.Attempted++
	switch {
	case r.interrupted():
		st.Interrupted++
	case r.code == 0:
		st.Succeeded++
	case r.code == clitest.ExitFenced:
		st.Fenced++
	case r.code == clitest.ExitNotAvailable:
		st.Nothing++
	default:
		st.Other++
	}
}

func (s *stormStats) totals() (attempted, succeeded int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.m {
		attempted += st.Attempted
		succeeded += st.Succeeded
	}
	return
}

// stormCrashPoints are given, now and then, to a storm process as
// FENCE_CRASH: deliberate crashes at the named steps, on top of the kills.
var stormCrashPoints = []string{"after-commit", "move:after-rename", "adopt:mid", "adopt:after-commit", "claim:after-commit", "complete:after-commit"}

// ack is an acknowledged (exit 0) fenced step of an agent.
type stormAck struct {
	op, task string
	token    uint64
}

// TestTorture_KillStorm runs the storm on every journal backend. On etcd
// the leases run out by etcd's clock: the walked-away agents check with
// verify that theirs has before presenting it, and the drain revokes the
// leases left rather than moving the test clock.
func TestTorture_KillStorm(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { testKillStorm(t, b) })
	}
}

func testKillStorm(t *testing.T, b tortBackend) {
	const agents = 8
	initial := b.size(200, 2000)
	duration := time.Duration(tortureScale(3, 60)) * time.Second
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill storm on %s: %d agents, %d initial tasks, %s, seed %d", b.name, agents, initial, duration, seed)

	base := t.TempDir()
	dir := filepath.Join(base, "tree")
	mk := func(args ...string) *exec.Cmd { return fencectlCmd(dir, args...) }
	initCmd := mk("init", "--ttl", "2s", "--max-attempts", "3", "--retry-backoff", "0s")
	initCmd.Env = append(initCmd.Env, b.start(t)...)
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	drops := filepath.Join(base, "drops") // same file system as the tree
	if err := os.Mkdir(drops, 0o755); err != nil {
		t.Fatal(err)
	}
	drop := func(id string) error {
		tmp := filepath.Join(drops, id)
		if err := os.WriteFile(tmp, []byte("dropped "+id+"\n"), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, filepath.Join(dir, "inbox", id))
	}
	// The initial batch goes through the inbox: the first writers adopt it,
	// under the killer.
	var known sync.Map // ids that must exist at the end: dropped, or added with exit 0
	for i := 0; i < initial; i++ {
		id := fmt.Sprintf("t%05d", i)
		if err := drop(id); err != nil {
			t.Fatal(err)
		}
		known.Store(id, true)
	}

	procs := &stormProcs{live: map[*exec.Cmd]struct{}{}}
	stats := &stormStats{m: map[string]*stormStat{}}
	var (
		errMu   sync.Mutex
		errs    []string
		ackMu   sync.Mutex
		acks    []stormAck
		stop    atomic.Bool
		workers sync.WaitGroup
	)
	unexpected := func(what string, r stormResult) {
		errMu.Lock()
		defer errMu.Unlock()
		if len(errs) < 50 {
			errs = append(errs, fmt.Sprintf("%s: exit %d\n%s%s", what, r.code, r.stdout, r.stderr))
		}
	}
	// step runs one fencectl command of the storm; now and then it carries
	// a crash point.
	step := func(rng *rand.Rand, op string, stdin string, args ...string) stormResult {
		c := mk(args...)
		if rng.IntN(100) < 3 {
			c.Env = append(c.Env, "FENCE_CRASH="+stormCrashPoints[rng.IntN(len(stormCrashPoints))])
		}
		if stdin != "" {
			c.Stdin = strings.NewReader(stdin)
		}
		r := procs.run(c)
		stats.add(op, r)
		return r
	}

	start := time.Now()
	deadline := start.Add(duration)
	var staleTried, staleAccepted atomic.Int64
	// Named batch claims: each runs under an agent name of its own, so
	// that the log tells its claims apart: a batch claims all of its
	// tasks in one commit or none, killed or not.
	var batchMu sync.Mutex
	batches := map[string]int{} // agent name of a batch → how many tasks it named
	var batchesAcked atomic.Int64
	for a := 0; a < agents; a++ {
		workers.Add(1)
		go func(agent string, rng *rand.Rand) {
			defer workers.Done()
			// Claims this agent walked away from: it comes back later with
			// the old token, as an agent restarted from an old note would.
			type oldClaim struct {
				task, token string
				left        time.Time
			}
			var walked []oldClaim
			for !stop.Load() {
				if len(walked) > 0 && time.Since(walked[0].left) > 2100*time.Millisecond {
					// The lease ran 2 s from the commit of the last step,
					// which came before that step's process ended: on the
					// hosts' clock (bbolt) it is gone now, by expiry or by
					// reaping. etcd's lessor ends leases on its own clock,
					// up to half a second late: verify says when (an end
					// is for good), and until then the claim waits.
					old := walked[0]
					walked = walked[1:]
					if r := step(rng, "verify_walked", "", "verify", old.task, "--token", old.token); r.code != clitest.ExitFenced {
						if !r.interrupted() && r.code != 0 {
							unexpected(agent+" verify "+old.task, r)
						}
						old.left = time.Now()
						walked = append(walked, old)
						continue
					}
					op := []string{"complete", "heartbeat", "release", "fail", "put"}[rng.IntN(5)]
					args := []string{op, old.task, "--token", old.token, "--agent", agent}
					if op == "put" {
						args = []string{"put", old.task, "stale", "-", "--token", old.token}
					}
					r := step(rng, "stale_"+op, "stale\n", args...)
					staleTried.Add(1)
					switch {
					case r.interrupted():
					case r.code == 0:
						staleAccepted.Add(1)
						unexpected(fmt.Sprintf("%s: %s with a token whose lease had run out was ACCEPTED", agent, strings.Join(args, " ")), r)
					case r.code != clitest.ExitFenced:
						unexpected(agent+" stale "+strings.Join(args, " "), r)
					}
				}
				if rng.IntN(100) < 15 {
					// A named batch of two tasks seen in available/.
					entries, _ := os.ReadDir(filepath.Join(dir, "available"))
					if len(entries) < 2 {
						continue
					}
					p := rng.Perm(len(entries))
					ids := []string{entries[p[0]].Name(), entries[p[1]].Name()}
					batchMu.Lock()
					who := fmt.Sprintf("%s-b%d", agent, len(batches))
					batches[who] = len(ids)
					batchMu.Unlock()
					r := step(rng, "claim_batch", "", "claim", ids[0], ids[1], "--json", "--agent", who, "--ttl", "2s")
					switch {
					case r.interrupted() || r.code == clitest.ExitNotAvailable:
						continue
					case r.code != 0:
						unexpected(who+" claim "+strings.Join(ids, " "), r)
						continue
					}
					var bc struct {
						Assigned []struct {
							Task  string `json:"task"`
							Token uint64 `json:"token"`
						} `json:"assigned"`
					}
					if err := json.Unmarshal([]byte(r.stdout), &bc); err != nil || len(bc.Assigned) != len(ids) {
						unexpected(who+" claim batch output: not all of "+strings.Join(ids, " "), r)
						continue
					}
					batchesAcked.Add(1)
					for _, a := range bc.Assigned {
						args := []string{"complete", a.Task, "--token", strconv.FormatUint(a.Token, 10), "--agent", who}
						for try := 0; try < 5; try++ {
							r := step(rng, "complete", "", args...)
							if r.interrupted() {
								continue
							}
							if r.code == 0 {
								ackMu.Lock()
								acks = append(acks, stormAck{"complete", a.Task, a.Token})
								ackMu.Unlock()
							} else if r.code != clitest.ExitFenced {
								unexpected(who+" "+strings.Join(args, " "), r)
							}
							break
						}
					}
					continue
				}
				r := step(rng, "claim", "", "claim", "--json", "--agent", agent, "--ttl", "2s")
				switch {
				case r.interrupted():
					continue
				case r.code == clitest.ExitNotAvailable:
					time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
					continue
				case r.code != 0:
					unexpected(agent+" claim", r)
					continue
				}
				var c struct {
					Task  string `json:"task"`
					Token uint64 `json:"token"`
				}
				if err := json.Unmarshal([]byte(r.stdout), &c); err != nil || c.Token == 0 {
					unexpected(agent+" claim output", r)
					continue
				}
				tok := strconv.FormatUint(c.Token, 10)
				fenced := func(op, stdin string, args ...string) stormResult {
					r := step(rng, op, stdin, args...)
					switch {
					case r.interrupted():
					case r.code == 0:
						ackMu.Lock()
						acks = append(acks, stormAck{op, c.Task, c.Token})
						ackMu.Unlock()
					case r.code != clitest.ExitFenced:
						unexpected(agent+" "+strings.Join(args, " "), r)
					}
					return r
				}
				if rng.IntN(100) < 30 {
					fenced("heartbeat", "", "heartbeat", c.Task, "--token", tok, "--agent", agent)
				}
				if rng.IntN(100) < 15 {
					fenced("put", "out of "+tok+"\n", "put", c.Task, "log", "-", "--token", tok, "--agent", agent)
				}
				var op string
				var args []string
				stdin := ""
				switch n := rng.IntN(100); {
				case n < 70:
					op, args = "complete", []string{"complete", c.Task, "--token", tok, "--agent", agent}
					if n < 35 {
						args, stdin = append(args, "--result", "-"), "result of "+tok+"\n"
					}
				case n < 80:
					op, args = "fail", []string{"fail", c.Task, "--token", tok, "--agent", agent, "--reason", "storm"}
				case n < 90:
					op, args = "release", []string{"release", c.Task, "--token", tok, "--agent", agent}
				default:
					// Walk away: the lease expires and a later claim reaps it.
					walked = append(walked, oldClaim{c.Task, tok, time.Now()})
					continue
				}
				// A step whose outcome is unknown (killed, crashed) is retried
				// with the same token: the retry answers success if the step
				// had gone through, or does it now, or is refused (exit 3).
				for try := 0; try < 5; try++ {
					if r := fenced(op, stdin, args...); !r.interrupted() {
						break
					}
				}
			}
		}(fmt.Sprintf("agent-%d", a), rand.New(rand.NewPCG(seed, uint64(a))))
	}

	// The producer keeps work coming until the deadline: adds (under the
	// killer, so some outcomes are unknown) and inbox drops.
	workers.Add(1)
	var addsAcked, addsUnknown, dropped atomic.Int64
	// Some adds wait for a task added before (--after): none of them may
	// be claimed before that task is done. depsOf holds every add tried.
	var depsMu sync.Mutex
	depsOf := map[string]string{}
	dropped.Store(int64(initial))
	go func(rng *rand.Rand) {
		defer workers.Done()
		for n := 0; !stop.Load(); n++ {
			// Keep the backlog small, but add now and then anyway, so
			// that tasks with dependencies come even while it is not.
			if tortDirLen(dir, "available")+tortDirLen(dir, "inbox") > 4*agents && rng.IntN(4) > 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if rng.IntN(100) < 20 {
				for k := 0; k < 5; k++ {
					id := fmt.Sprintf("i%05d-%d", n, k)
					if err := drop(id); err != nil {
						unexpected("drop "+id+": "+err.Error(), stormResult{})
						continue
					}
					known.Store(id, true)
					dropped.Add(1)
				}
				continue
			}
			id := fmt.Sprintf("p%05d", n)
			args := []string{"add", "--id", id, "-"}
			var dep string
			if rng.IntN(100) < 40 {
				// A task added or dropped before (acked or not: an
				// unknown one is refused, exit 6, if it never made it).
				// Mostly the add just before, likely not done yet.
				dep = fmt.Sprintf("t%05d", rng.IntN(initial))
				if n > 0 && rng.IntN(4) > 0 {
					dep = fmt.Sprintf("p%05d", n-1)
				}
				args = append(args, "--after", dep)
				depsMu.Lock()
				depsOf[id] = dep
				depsMu.Unlock()
			}
			r := step(rng, "add", "task "+id+"\n", args...)
			switch {
			case r.interrupted():
				addsUnknown.Add(1)
			case dep != "" && r.code == clitest.ExitNoSuchTask:
				// Its dependency was never added (an add killed before
				// its commit, or a drop number): nothing changed.
			case r.code == 0:
				known.Store(id, true)
				addsAcked.Add(1)
			default:
				unexpected("add "+id, r)
			}
		}
	}(rand.New(rand.NewPCG(seed, 100)))

	// A reader looks at the tree the whole time; readers are killed too.
	// It shows initial tasks only once the first writers have adopted the
	// whole initial batch: until then an initial task may still wait in
	// inbox/, or be staged by a writer the killer stopped (.fence/tmp),
	// and "no such task" is the right answer.
	workers.Add(1)
	go func(rng *rand.Rand) {
		defer workers.Done()
		adopted := false
		for !stop.Load() {
			adopted = adopted || !initialPending(dir, initial)
			args := [][]string{{"status", "--json"}, {"log", "--json", "--limit", "20"}, {"show", fmt.Sprintf("t%05d", rng.IntN(initial)), "--json"}}[rng.IntN(3)]
			if args[0] == "show" && !adopted {
				args = []string{"status", "--json"}
			}
			r := step(rng, args[0], "", args...)
			if !r.interrupted() && r.code != 0 {
				unexpected(strings.Join(args, " "), r)
			}
			time.Sleep(time.Duration(20+rng.IntN(30)) * time.Millisecond)
		}
	}(rand.New(rand.NewPCG(seed, 200)))

	// An operator now and then reaps, revokes a live lease, or runs a full
	// replay (a writer that repairs), all of them killable too.
	var revoked atomic.Int64
	workers.Add(1)
	go func(rng *rand.Rand) {
		defer workers.Done()
		for !stop.Load() {
			time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond)
			switch n := rng.IntN(10); {
			case n < 4:
				entries, _ := os.ReadDir(filepath.Join(dir, "claimed"))
				if len(entries) == 0 {
					continue
				}
				id := entries[rng.IntN(len(entries))].Name()
				r := step(rng, "revoke", "", "revoke", id, "--reason", "operator")
				switch {
				case r.code == 0:
					revoked.Add(1)
				case r.interrupted() || r.code == clitest.ExitNotAvailable: // already gone
				default:
					unexpected("revoke "+id, r)
				}
			case n < 7:
				if r := step(rng, "reap", "", "reap"); !r.interrupted() && r.code != 0 {
					unexpected("reap", r)
				}
			default:
				if r := step(rng, "replay", "", "replay"); !r.interrupted() && r.code != 0 {
					unexpected("replay during the storm", r)
				}
			}
		}
	}(rand.New(rand.NewPCG(seed, 400)))

	// The killer.
	killerDone := make(chan struct{})
	var signalsSent atomic.Int64
	go func(rng *rand.Rand) {
		defer close(killerDone)
		for !stop.Load() {
			time.Sleep(time.Duration(20+rng.IntN(181)) * time.Millisecond)
			if procs.kill(rng) {
				signalsSent.Add(1)
			}
		}
	}(rand.New(rand.NewPCG(seed, 300)))

	time.Sleep(time.Until(deadline)) // the storm's length is the test's parameter, not a synchronisation
	stop.Store(true)
	workers.Wait()
	<-killerDone
	stormTook := time.Since(start)
	attempted, succeeded := stats.totals()
	t.Logf("storm: %s, %d processes, %d killed, %d crashed at a crash point", stormTook.Round(time.Millisecond), procs.started.Load(), procs.killed.Load(), procs.crashed.Load())

	// What the storm left before any repair: at most the unfinished moves
	// of the last commit (a killed writer's), never anything worse.
	driftCode, driftBefore, driftOut := tortReplay(t, mk, true)
	for _, f := range driftBefore {
		if !slices.Contains(b.crashLeaves, f.Kind) {
			t.Errorf("after the storm, before replay: tortFinding %s %s: %s (only %v are expected on %s)", f.Kind, f.Task, f.Detail, b.crashLeaves, b.name)
		}
	}
	if driftCode != 0 && driftCode != clitest.ExitDrift {
		t.Errorf("replay --check after the storm: exit %d\n%s", driftCode, driftOut)
	}
	if code, fs, out := tortReplay(t, mk, false); code != 0 {
		t.Errorf("replay after the storm: exit %d, %d findings\n%s", code, len(fs), out)
	}
	code, after, out := tortReplay(t, mk, true)
	mismatchesAfterReplay := len(after)
	if code != 0 || mismatchesAfterReplay != 0 {
		t.Errorf("replay --check after replay: exit %d, %d findings\n%s", code, mismatchesAfterReplay, out)
	}

	// Drain: on a clock an hour ahead every lease has expired; reap, then
	// eight agents (no killer now) finish everything that is left.
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	mkLater := func(args ...string) *exec.Cmd {
		c := mk(args...)
		c.Env = append(c.Env, "FENCE_TEST_NOW="+later)
		return c
	}
	if b.expire != nil {
		var held []string
		for id, st := range tortStates(tortLog(t, mk)) {
			if st == "claimed" {
				held = append(held, id)
			}
		}
		b.expire(t, dir, held)
	}
	if out, err := mkLater("reap").CombinedOutput(); err != nil {
		t.Fatalf("final reap: %v\n%s", err, out)
	}
	var drainErrs []string
	var drainMu sync.Mutex
	var drained atomic.Int64
	var drainWG sync.WaitGroup
	for a := 0; a < agents; a++ {
		drainWG.Add(1)
		go func(agent string) {
			defer drainWG.Done()
			for {
				out, err := mkLater("claim", "--json", "--agent", agent).Output()
				if clitest.ExitCode(err) == clitest.ExitNotAvailable {
					return
				}
				var c struct {
					Task  string `json:"task"`
					Token uint64 `json:"token"`
				}
				if err == nil {
					err = json.Unmarshal(out, &c)
				}
				if err == nil {
					var cout []byte
					cout, err = mkLater("complete", c.Task, "--token", strconv.FormatUint(c.Token, 10), "--agent", agent).CombinedOutput()
					if err != nil {
						err = fmt.Errorf("complete %s: %v: %s", c.Task, err, cout)
					}
				}
				if err != nil {
					drainMu.Lock()
					drainErrs = append(drainErrs, fmt.Sprintf("%s: %v", agent, err))
					drainMu.Unlock()
					return
				}
				drained.Add(1)
			}
		}(fmt.Sprintf("drain-%d", a))
	}
	drainWG.Wait()
	for _, e := range drainErrs {
		t.Errorf("drain: %s", e)
	}
	// What still waits after the drain waits for a dependency that failed
	// for good (it stays blocked, by design): cancel those.
	cancelledBlocked := 0
	if entries, err := os.ReadDir(filepath.Join(dir, "waiting")); err == nil {
		for _, e := range entries {
			depsMu.Lock()
			dep := depsOf[e.Name()]
			depsMu.Unlock()
			if st := tortStates(tortLog(t, mk))[dep]; dep == "" || st != "failed" && st != "waiting" {
				t.Errorf("task %s still waits after the drain, but its dependency %q is %s", e.Name(), dep, st)
			}
			if out, err := mkLater("cancel", e.Name(), "--reason", "dependency failed").CombinedOutput(); err != nil {
				t.Errorf("cancel %s: %v\n%s", e.Name(), err, out)
			}
			cancelledBlocked++
		}
	}
	tortCheckClean(t, mk, "after the drain")

	// The audit.
	evs := tortLog(t, mk)
	states := tortStates(evs)
	problems, lost, dups := tortAudit(t, dir, states)
	for _, p := range problems {
		t.Errorf("tree vs journal: %s", p)
	}
	knownCount, missingKnown := 0, 0
	known.Range(func(k, _ any) bool {
		knownCount++
		if _, ok := states[k.(string)]; !ok {
			missingKnown++
			lost++
			t.Errorf("task %s was dropped in the inbox or added with exit 0, but the journal never got it", k)
		}
		return true
	})
	for id, st := range states {
		if st != "done" && st != "failed" {
			t.Errorf("task %s is %s after the drain, want done or failed", id, st)
		}
	}
	var status struct {
		Counts map[string]int `json:"counts"`
	}
	if out, err := mk("status", "--json").Output(); err != nil || json.Unmarshal(out, &status) != nil {
		t.Fatalf("status: %v %s", err, out)
	}
	sum := 0
	for _, n := range status.Counts {
		sum += n
	}
	files := len(tortFiles(t, dir))
	if sum != len(states) || files != len(states) {
		t.Errorf("status counts sum to %d, the log has %d tasks, the tree %d files: all three must agree", sum, len(states), files)
	}
	if n := tortDirLen(dir, "inbox"); n != 0 {
		t.Errorf("inbox/ holds %d files after the storm and replay", n)
	}
	// The quarantine may hold content staged by processes the storm killed
	// before their commit (swept there by later writers, named
	// fence-tmp.*); anything else there is a second copy of a task.
	quarantined, _ := os.ReadDir(filepath.Join(dir, ".fence", "quarantine"))
	sweptStaged := 0
	for _, e := range quarantined {
		if strings.HasPrefix(e.Name(), "fence-tmp.") {
			sweptStaged++
			continue
		}
		t.Errorf(".fence/quarantine holds %s: replay found a second copy of a task", e.Name())
	}
	staged := max(tortDirLen(dir, ".fence/tmp"), 0)

	fencing, doubles := tortFencing(evs)
	for _, p := range fencing {
		t.Errorf("fencing history: %s", p)
	}
	// Dependencies: no task was claimed before the task it waits for was
	// done. Batches: all of a batch's tasks claimed in one commit, or none.
	doneAt := map[string]uint64{}
	batchClaims := map[string][]tortEvent{}
	depViolations, batchViolations := 0, 0
	for _, ev := range evs {
		switch ev.Type {
		case "complete":
			if _, ok := doneAt[ev.Task]; !ok {
				doneAt[ev.Task] = ev.Seq
			}
		case "claim":
			if dep := depsOf[ev.Task]; dep != "" {
				if at, ok := doneAt[dep]; !ok || at > ev.Seq {
					depViolations++
					t.Errorf("seq %d: %s claimed before its dependency %s was done", ev.Seq, ev.Task, dep)
				}
			}
			if _, ok := batches[ev.Agent]; ok {
				batchClaims[ev.Agent] = append(batchClaims[ev.Agent], ev)
			}
		}
	}
	for who, cl := range batchClaims {
		if len(cl) != batches[who] || cl[len(cl)-1].Seq-cl[0].Seq != uint64(len(cl)-1) || cl[0].Time != cl[len(cl)-1].Time {
			batchViolations++
			t.Errorf("batch %s of %d tasks: %d claims in the log (%+v): want all in one commit, or none", who, batches[who], len(cl), cl)
		}
	}
	// Every acknowledged step is in the journal, and no task was completed
	// for two different tokens.
	type key struct {
		op, task string
		token    uint64
	}
	inLog := map[key]bool{}
	for _, ev := range evs {
		inLog[key{ev.Type, ev.Task, ev.Token}] = true
	}
	completedBy := map[string]map[uint64]bool{}
	unrecorded := 0
	for _, a := range acks {
		if !inLog[key{a.op, a.task, a.token}] {
			unrecorded++
			t.Errorf("%s of %s with token %d answered exit 0 but the journal has no such event", a.op, a.task, a.token)
		}
		if a.op == "complete" {
			if completedBy[a.task] == nil {
				completedBy[a.task] = map[uint64]bool{}
			}
			completedBy[a.task][a.token] = true
		}
	}
	for task, toks := range completedBy {
		if len(toks) > 1 {
			doubles++
			t.Errorf("task %s: complete answered exit 0 for %d different tokens", task, len(toks))
		}
	}
	for _, e := range errs {
		t.Errorf("unexpected outcome during the storm: %s", e)
	}

	done, failed := 0, 0
	for _, st := range states {
		switch st {
		case "done":
			done++
		case "failed":
			failed++
		}
	}
	stats.mu.Lock()
	perOp, _ := json.Marshal(stats.m)
	stats.mu.Unlock()
	tortureReport(t, b.part("kill_storm"), map[string]any{
		"backend": b.name, "agents": agents, "seed": seed, "seconds": stormTook.Seconds(),
		"tasks": len(states), "tasks_initial": initial, "tasks_added_acked": addsAcked.Load(), "adds_unknown_outcome": addsUnknown.Load(), "tasks_dropped": dropped.Load(),
		"processes": procs.started.Load(), "kills": procs.killed.Load(), "signals_sent": signalsSent.Load(), "crash_point_exits": procs.crashed.Load(),
		"ops_attempted": attempted, "ops_succeeded": succeeded, "ops": string(perOp), "acks_checked": len(acks), "acks_unrecorded": unrecorded,
		"double_completions": doubles, "lost_tasks": lost, "duplicate_files": dups, "known_tasks": knownCount, "known_missing": missingKnown,
		"drift_before_replay": len(driftBefore), "mismatches_after_replay": mismatchesAfterReplay,
		"fencing_violations": len(fencing), "revoked": revoked.Load(), "stale_attempts": staleTried.Load(), "stale_accepted": staleAccepted.Load(), "drained": drained.Load(), "done": done, "failed": failed,
		"staged_leftovers": staged, "staged_swept_to_quarantine": sweptStaged, "unexpected_exits": len(errs),
		"batches_tried": len(batches), "batches_acked": batchesAcked.Load(), "batch_violations": batchViolations,
		"adds_with_dependency": len(depsOf), "dependency_violations": depViolations, "blocked_cancelled_after_drain": cancelledBlocked,
	})
}

// initialPending reports whether any of the storm's initial tasks
// (t00000 …) is still in inbox/ or staged for adoption in .fence/tmp, that
// is, not yet in the journal.
func initialPending(dir string, initial int) bool {
	for _, sub := range []string{"inbox", filepath.Join(".fence", "tmp")} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return true
		}
		for _, e := range entries {
			name := strings.TrimPrefix(e.Name(), "adopt-")
			var n int
			if _, err := fmt.Sscanf(name, "t%05d", &n); err == nil && n < initial && len(name) == 6 {
				return true
			}
		}
	}
	return false
}
