package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/fencectl/fencectl/fence"
	etcdstore "github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/record"
)

// Torture part "many hosts": agents on two hosts share one etcd tree.
// Each host is its processes' own working directory and its own path to
// the tree (host B reaches it through a symlink to the root, the stand-in
// for a second mount of a shared file system), and every process is its
// own etcd client. Some agents lose their lease on purpose, by expiry on
// etcd's clock or by revocation of its etcd lease from outside, wait
// until `verify` says it is lost, and then present the old token to
// complete or heartbeat: every such call must exit 3 and change nothing.
// At the end every task is done exactly once, the claim tokens strictly
// increase across the hosts in the log, and no stale step is in the log.

// hostsBackend is the etcd row of backends: the only store several hosts
// may share.
func hostsBackend(t *testing.T) tortBackend {
	for _, b := range backends {
		if b.name == "etcd" {
			return b
		}
	}
	t.Fatal("no etcd row in backends")
	return tortBackend{}
}

// host is one machine's view of the tree: its working directory and the
// path by which it reaches the tree from there.
type host struct {
	name, cwd, tree string
}

func (h host) cmd(args ...string) *exec.Cmd {
	c := clitest.Binary{Path: fencectlBin}.Command(h.tree, args...)
	c.Dir = h.cwd
	c.Env = append(c.Env, "FENCE_AGENT="+h.name)
	return c
}

// hostsStale is one deliberate use of a lost token.
type hostsStale struct {
	op, task string
	token    uint64
}

func TestTorture_Hosts(t *testing.T) {
	b := hostsBackend(t)
	const perHost = 4
	tasks := b.size(150, 1500)
	seed := uint64(time.Now().UnixNano())
	t.Logf("two hosts, %d agents each, %d tasks, seed %d", perHost, tasks, seed)

	base := t.TempDir()
	root := filepath.Join(base, "tree")
	hosts := []host{
		{"host-a", filepath.Join(base, "host-a"), "../tree"},
		{"host-b", filepath.Join(base, "host-b"), "mnt/tree"},
	}
	for _, h := range hosts {
		if err := os.MkdirAll(h.cwd, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(hosts[1].cwd, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(hosts[1].cwd, "mnt", "tree")); err != nil {
		t.Fatal(err)
	}
	initCmd := hosts[0].cmd("init", "--ttl", "2s", "--max-attempts", "1000", "--retry-backoff", "0s")
	initCmd.Env = append(initCmd.Env, b.start(t)...)
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	// Both hosts add half the tasks each.
	var addWG sync.WaitGroup
	addErrs := make(chan error, len(hosts))
	for i, h := range hosts {
		addWG.Add(1)
		go func() {
			defer addWG.Done()
			for n := i; n < tasks; n += len(hosts) {
				if out, err := h.cmd("add", "--id", fmt.Sprintf("t%05d", n)).CombinedOutput(); err != nil {
					addErrs <- fmt.Errorf("%s add: %v\n%s", h.name, err, out)
					return
				}
			}
		}()
	}
	addWG.Wait()
	close(addErrs)
	for err := range addErrs {
		t.Fatal(err)
	}

	var (
		mu                        sync.Mutex
		completedBy               = map[string][]uint64{}
		stales                    []hostsStale
		staleTried, staleAccepted atomic.Int64
		staleOther                atomic.Int64
		lostByExpiry, lostByRevoc atomic.Int64
		claims                    atomic.Int64
		errs                      []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	doneCount := func(h host) int {
		out, err := h.cmd("status", "--json").Output()
		var st struct {
			Counts map[string]int `json:"counts"`
		}
		if err != nil || json.Unmarshal(out, &st) != nil {
			fail("%s status: %v %s", h.name, err, out)
			return -1
		}
		return st.Counts["done"]
	}
	// lost waits until verify refuses token: a lease's end is for good.
	lost := func(h host, task string, token uint64) bool {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			err := h.cmd("verify", task, "--token", strconv.FormatUint(token, 10)).Run()
			switch code := clitest.ExitCode(err); code {
			case clitest.ExitFenced:
				return true
			case clitest.ExitOK:
				time.Sleep(50 * time.Millisecond) // etcd's lessor ends it, on its own clock
			default:
				fail("%s verify %s: exit %d", h.name, task, code)
				return false
			}
		}
		fail("%s: the lease of %s (token %d) never ended", h.name, task, token)
		return false
	}

	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	var wg sync.WaitGroup
	for hi, h := range hosts {
		for a := 0; a < perHost; a++ {
			wg.Add(1)
			agent := fmt.Sprintf("%s-%d", h.name, a)
			rng := rand.New(rand.NewPCG(seed, uint64(hi*100+a)))
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					out, err := h.cmd("claim", "--json", "--agent", agent, "--ttl", "2s").Output()
					if code := clitest.ExitCode(err); code == clitest.ExitNotAvailable {
						// Leases lost by others are reaped by the next claim
						// after they end; stop once everything is done.
						if doneCount(h) == tasks {
							return
						}
						time.Sleep(time.Duration(20+rng.IntN(30)) * time.Millisecond)
						continue
					} else if err != nil {
						fail("%s claim: %v %s", agent, err, out)
						return
					}
					var c struct {
						Task  string `json:"task"`
						Token uint64 `json:"token"`
					}
					if err := json.Unmarshal(out, &c); err != nil || c.Token == 0 {
						fail("%s claim output %q: %v", agent, out, err)
						return
					}
					claims.Add(1)
					tok := strconv.FormatUint(c.Token, 10)
					if rng.IntN(100) < 12 {
						// Lose the lease: revoked from outside (the test's own
						// client: another host) or run out on etcd's clock.
						if rng.IntN(2) == 0 {
							b.expire(t, root, []string{c.Task})
							lostByRevoc.Add(1)
						} else {
							lostByExpiry.Add(1)
						}
						if !lost(h, c.Task, c.Token) {
							return
						}
						// Give another agent the chance to take it over.
						if rng.IntN(2) == 0 {
							time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
						}
						op := []string{"complete", "heartbeat"}[rng.IntN(2)]
						outS, err := h.cmd(op, c.Task, "--token", tok, "--agent", agent).CombinedOutput()
						staleTried.Add(1)
						mu.Lock()
						stales = append(stales, hostsStale{op, c.Task, c.Token})
						mu.Unlock()
						switch code := clitest.ExitCode(err); code {
						case clitest.ExitFenced:
						case clitest.ExitOK:
							staleAccepted.Add(1)
							fail("%s: %s %s with its lost token %d was ACCEPTED\n%s", agent, op, c.Task, c.Token, outS)
						default:
							staleOther.Add(1)
							fail("%s: stale %s %s: exit %d, want 3\n%s", agent, op, c.Task, code, outS)
						}
						continue
					}
					if rng.IntN(100) < 30 {
						if out, err := h.cmd("heartbeat", c.Task, "--token", tok, "--agent", agent).CombinedOutput(); err != nil {
							fail("%s heartbeat %s: %v\n%s", agent, c.Task, err, out)
							continue
						}
					}
					if out, err := h.cmd("complete", c.Task, "--token", tok, "--agent", agent).CombinedOutput(); err != nil {
						fail("%s complete %s: %v\n%s", agent, c.Task, err, out)
						continue
					}
					mu.Lock()
					completedBy[c.Task] = append(completedBy[c.Task], c.Token)
					mu.Unlock()
				}
				fail("%s: not done after %s", agent, time.Since(start).Round(time.Second))
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, e := range errs {
		t.Error(e)
	}

	// The audit, from host B's path.
	hb := hosts[1]
	mk := func(args ...string) *exec.Cmd { return hb.cmd(args...) }
	evs := tortLog(t, mk)
	fencing, doubles := tortFencing(evs)
	for _, p := range fencing {
		t.Errorf("fencing history: %s", p)
	}
	completes := map[string]int{}
	type key struct {
		op, task string
		token    uint64
	}
	inLog := map[key]bool{}
	byHost := map[string]int{}
	for _, ev := range evs {
		inLog[key{ev.Type, ev.Task, ev.Token}] = true
		if ev.Type == "complete" {
			completes[ev.Task]++
		}
		if ev.Type == "claim" {
			byHost[strings.SplitN(ev.Agent, "-", 3)[0]+"-"+strings.SplitN(ev.Agent, "-", 3)[1]]++
		}
	}
	for i := 0; i < tasks; i++ {
		id := fmt.Sprintf("t%05d", i)
		if completes[id] != 1 {
			t.Errorf("task %s completed %d times in the log, want 1", id, completes[id])
		}
		if len(completedBy[id]) != 1 {
			t.Errorf("task %s: complete answered exit 0 for tokens %v, want exactly one", id, completedBy[id])
		}
	}
	staleInLog := 0
	for _, s := range stales {
		if inLog[key{s.op, s.task, s.token}] {
			staleInLog++
			t.Errorf("%s of %s with lost token %d is in the log", s.op, s.task, s.token)
		}
	}
	if byHost["host-a"] == 0 || byHost["host-b"] == 0 {
		t.Errorf("claims by host: %v; want both hosts to have claimed", byHost)
	}
	problems, lostFiles, dups := tortAudit(t, root, tortStates(evs))
	for _, p := range problems {
		t.Errorf("tree vs journal: %s", p)
	}
	tortCheckClean(t, mk, "after the run")
	if n := tortDirLen(root, "done"); n != tasks {
		t.Errorf("done/ holds %d files, want %d", n, tasks)
	}
	t.Logf("%d claims in %s by %v; %d leases lost on purpose (%d expired, %d revoked), %d stale calls, %d accepted",
		claims.Load(), elapsed.Round(time.Millisecond), byHost, lostByExpiry.Load()+lostByRevoc.Load(), lostByExpiry.Load(), lostByRevoc.Load(), staleTried.Load(), staleAccepted.Load())
	tortureReport(t, "hosts_etcd", map[string]any{
		"hosts": len(hosts), "agents": perHost * len(hosts), "tasks": tasks, "seed": seed, "seconds": elapsed.Seconds(),
		"claims": claims.Load(), "claims_by_host": fmt.Sprint(byHost), "leases_lost_expired": lostByExpiry.Load(), "leases_lost_revoked": lostByRevoc.Load(),
		"stale_attempts": staleTried.Load(), "stale_accepted": staleAccepted.Load(), "stale_other_exit": staleOther.Load(), "stale_in_log": staleInLog,
		"double_completions": doubles, "fencing_violations": len(fencing), "lost_tasks": lostFiles, "duplicate_files": dups,
	})
}

// TestTorture_HostsRetries measures how often etcd's optimistic
// transactions rerun under contention: 16 clients in this process, each
// its own fence.Tree with its own etcd client (so they share no group
// commit: 16 hosts, as far as etcd can tell), claim and complete until
// the tree is empty. It reports the reruns per claim (etcd.Retries, which
// counts every rerun in the process); it checks that every task was done
// once, not a figure.
func TestTorture_HostsRetries(t *testing.T) {
	b := hostsBackend(t)
	const clients = 16
	tasks := b.size(400, 4000)
	root := filepath.Join(t.TempDir(), "tree")
	c := clitest.Binary{Path: fencectlBin}.Command(root, "init", "--max-attempts", "1000", "--retry-backoff", "0s")
	c.Env = append(c.Env, b.start(t)...)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	ctx := context.Background()
	trees := make([]*fence.Tree, clients)
	for i := range trees {
		// A minute, not the default 10 s: on this shared machine a claim
		// among 16 contenders has rerun for longer than that.
		tr, err := fence.Open(root, fence.Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		trees[i] = tr
	}
	for i := 0; i < tasks; i++ {
		if _, err := trees[i%clients].Add(ctx, fence.AddRequest{ID: fmt.Sprintf("t%05d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	before := etcdstore.Retries.Load()
	start := time.Now()
	var claimed, completed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i, tr := range trees {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("client-%d", i)
			for {
				r, err := tr.Claim(ctx, fence.ClaimRequest{Agent: agent})
				if errors.Is(err, fence.ErrNothingToClaim) {
					errs <- nil
					return
				}
				if err != nil {
					errs <- fmt.Errorf("%s claim: %w", agent, err)
					return
				}
				claimed.Add(1)
				if _, err := tr.Complete(ctx, fence.FencedRequest{ID: r.Task.ID, Token: r.Token, Agent: agent}); err != nil {
					errs <- fmt.Errorf("%s complete %s: %w", agent, r.Task.ID, err)
					return
				}
				completed.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	retries := etcdstore.Retries.Load() - before
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if claimed.Load() != int64(tasks) || completed.Load() != int64(tasks) {
		t.Errorf("%d claims and %d completions, want %d each", claimed.Load(), completed.Load(), tasks)
	}
	st, err := trees[0].Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[record.Done] != tasks {
		t.Errorf("status: %v, want %d done", st.Counts, tasks)
	}
	perClaim := float64(retries) / float64(max(claimed.Load(), 1))
	t.Logf("%d clients: %d claims + completes in %s (%.0f claims/s); %d transaction reruns, %.2f per claim (claim and complete both count)",
		clients, claimed.Load(), elapsed.Round(time.Millisecond), float64(claimed.Load())/elapsed.Seconds(), retries, perClaim)
	tortureReport(t, "hosts_etcd_retries", map[string]any{
		"clients": clients, "tasks": tasks, "claims": claimed.Load(), "seconds": elapsed.Seconds(),
		"claims_per_second": float64(int(float64(claimed.Load())/elapsed.Seconds()*10)) / 10,
		"reruns":            retries, "reruns_per_claim": float64(int(perClaim*100)) / 100,
	})
}
