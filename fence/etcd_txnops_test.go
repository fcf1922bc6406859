package fence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal"
	etcdstore "github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
	"github.com/fencectl/fencectl/journal/record"
)

// An etcd server started with a lower --max-txn-ops (operators lower it
// from its default of 128) refuses every transaction that holds more
// operations. Every commit whose size depends on the data (the
// dependents a completion releases, a backlog of reaps, a claim of the
// next N, a group of agents' operations) must still go through, down to
// etcd.MinTxnOps: these run there.

// smallEtcd is a tree whose journal is on an etcd that takes at most
// etcd.MinTxnOps operations a transaction.
type smallEtcd struct {
	tree *fence.Tree
	cli  *clientv3.Client
}

const smallPrefix = "/small"

func newSmallEtcd(t *testing.T) smallEtcd {
	t.Helper()
	c := etcdtest.StartWith(t, 1, etcdtest.Options{MaxTxnOps: etcdstore.MinTxnOps})
	cfg := journal.Config{Backend: "etcd", Endpoints: c.Endpoints(), Prefix: smallPrefix}
	root := filepath.Join(t.TempDir(), "tree")
	if _, err := fence.InitTree(root, record.Defaults{TTL: time.Minute, MaxAttempts: 3}, fence.Options{Journal: &cfg}); err != nil {
		t.Fatalf("init on etcd --max-txn-ops %d: %v", etcdstore.MinTxnOps, err)
	}
	tree, err := fence.Open(root, fence.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tree.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return smallEtcd{tree, cli}
}

// expireAll ends every lease now, as etcd does when TTLs run out: it
// deletes the liveness keys, and the mark of a recent sweep.
func (s smallEtcd) expireAll(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if _, err := s.cli.Delete(ctx, smallPrefix+"/l/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Delete(ctx, smallPrefix+"/m/sweep"); err != nil {
		t.Fatal(err)
	}
}

func (s smallEtcd) counts(t *testing.T) map[record.State]int {
	t.Helper()
	st, err := s.tree.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	return st.Counts
}

// A task that 60 others wait for is completed, and all 60 are available
// when Complete returns. Eight dependents released in the completion's
// commit were refused there; it is made again releasing none, and the
// rest go in commits small enough. A second such task is completed with
// what the tree learned.
func TestEtcdSmallTxnOps_CompleteReleasesManyDependents(t *testing.T) {
	const n = 60
	s := newSmallEtcd(t)
	for _, root := range []string{"root1", "root2"} {
		add(t, s.tree, root, 0)
		for i := range n {
			id := fmt.Sprintf("%s-d%02d", root, i)
			if _, err := s.tree.Add(bg, fence.AddRequest{ID: id, After: []string{root}, Content: strings.NewReader("content of " + id)}); err != nil {
				t.Fatalf("add %s --after %s: %v", id, root, err)
			}
		}
		c := claim(t, s.tree, root, "a")
		if _, err := s.tree.Complete(bg, fence.FencedRequest{ID: root, Token: c.Token, Agent: "a"}); err != nil {
			t.Fatalf("complete %s, which %d tasks wait for: %v", root, n, err)
		}
		if got := s.counts(t); got[record.Available] != n || got[record.Waiting] != 0 {
			t.Fatalf("after complete %s: %v, want all %d dependents available", root, got, n)
		}
		for i := range n {
			fileAt(t, s.tree, fmt.Sprintf("%s-d%02d", root, i), record.Available)
		}
		// Claim them all, in batches of the next 8: each batch too large
		// is claimed again for fewer.
		for claimed := 0; claimed < n; {
			b, err := s.tree.ClaimBatch(bg, fence.BatchClaimRequest{Agent: "fleet", Count: 8})
			if err != nil {
				t.Fatalf("claim --count 8 after %d: %v", claimed, err)
			}
			claimed += len(b.Assigned)
		}
	}
	checkInvariants(t, s.tree)
}

// Sixty leases that ran out together: reap frees and reports each, and so
// does the next claim (which reaps them in commits of its own first). A
// claim --count N of more than one commit claims some, not none.
func TestEtcdSmallTxnOps_ReapManyAtOnce(t *testing.T) {
	const n = 60
	s := newSmallEtcd(t)
	for i := range n {
		add(t, s.tree, fmt.Sprintf("t%02d", i), 0)
	}
	b, err := s.tree.ClaimBatch(bg, fence.BatchClaimRequest{Agent: "fleet", Count: n})
	if err != nil {
		t.Fatalf("claim --count %d: %v", n, err)
	}
	if len(b.Assigned) == 0 {
		t.Fatalf("claim --count %d claimed none", n)
	}
	for claimed := len(b.Assigned); claimed < n; {
		b, err := s.tree.ClaimBatch(bg, fence.BatchClaimRequest{Agent: "fleet", Count: n})
		if err != nil {
			t.Fatalf("claim --count %d after %d: %v", n, claimed, err)
		}
		claimed += len(b.Assigned)
	}
	s.expireAll(t)
	reaped, err := s.tree.Reap(bg, false)
	if err != nil {
		t.Fatalf("reap of %d expired leases: %v", n, err)
	}
	if len(reaped) != n {
		t.Errorf("reap reported %d leases, want %d", len(reaped), n)
	}
	if got := s.counts(t); got[record.Claimed] != 0 || got[record.Available] != n {
		t.Errorf("after reap: %v, want all %d available", got, n)
	}
	// Claimed again, and run out again: the next claim reaps them first.
	for claimed := 0; claimed < n; {
		b, err := s.tree.ClaimBatch(bg, fence.BatchClaimRequest{Agent: "fleet", Count: 8})
		if err != nil {
			t.Fatal(err)
		}
		claimed += len(b.Assigned)
	}
	s.expireAll(t)
	c, err := s.tree.Claim(bg, fence.ClaimRequest{Agent: "next"})
	if err != nil {
		t.Fatalf("claim after %d leases ran out: %v", n, err)
	}
	if len(c.Reaped) != n {
		t.Errorf("the claim reported %d reaped leases, want %d", len(c.Reaped), n)
	}
	if got := s.counts(t); got[record.Claimed] != 1 || got[record.Available] != n-1 {
		t.Errorf("after the claim: %v, want one claimed and %d available", got, n-1)
	}
	checkInvariants(t, s.tree)
}

// Agents of one process share commits (group commit): sixty of them at
// once read ahead more keys than one request may hold, and commit more
// than one transaction takes.
func TestEtcdSmallTxnOps_ManyAgentsAtOnce(t *testing.T) {
	const n = 60
	s := newSmallEtcd(t)
	for i := range n {
		add(t, s.tree, fmt.Sprintf("t%02d", i), 0)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			agent := fmt.Sprintf("a%02d", i)
			c, err := s.tree.Claim(bg, fence.ClaimRequest{Agent: agent})
			if err != nil {
				t.Errorf("claim as %s: %v", agent, err)
				return
			}
			if _, err := s.tree.Complete(bg, fence.FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: agent}); err != nil {
				t.Errorf("complete %s: %v", c.Task.ID, err)
			}
		})
	}
	wg.Wait()
	if got := s.counts(t); got[record.Done] != n {
		t.Errorf("after %d agents: %v, want all done", n, got)
	}
	checkInvariants(t, s.tree)
}

// A task with a long history (heartbeats are events): its log reads
// more events than one request may hold, and a claim that finds its file
// gone reads its newest event (was it being placed?) in its commit,
// whose every read is a check etcd counts.
func TestEtcdSmallTxnOps_LongHistory(t *testing.T) {
	const beats = 40
	s := newSmallEtcd(t)
	add(t, s.tree, "long", 0)
	add(t, s.tree, "next", 0)
	c := claim(t, s.tree, "long", "a")
	for range beats {
		if _, err := s.tree.Heartbeat(bg, fence.FencedRequest{ID: "long", Token: c.Token, Agent: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.tree.Log(bg, fence.LogFilter{Task: "long", Heartbeats: true})
	if err != nil {
		t.Fatalf("log --task of %d events: %v", beats+2, err)
	}
	if len(evs) != beats+2 {
		t.Errorf("log --task: %d events, want %d", len(evs), beats+2)
	}
	if _, err := s.tree.Release(bg, fence.FencedRequest{ID: "long", Token: c.Token, Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.tree.Path("long", record.Available)); err != nil {
		t.Fatal(err)
	}
	got, err := s.tree.Claim(bg, fence.ClaimRequest{Agent: "b"})
	if err != nil {
		t.Fatalf("claim next past a task with %d events whose file is gone: %v", beats+3, err)
	}
	if got.Task.ID != "next" {
		t.Errorf("claimed %s, want next", got.Task.ID)
	}
	if c := s.counts(t); c[record.Failed] != 1 || c[record.Claimed] != 1 {
		t.Errorf("after the claim: %v, want long failed (its file missing) and next claimed", c)
	}
	checkInvariants(t, s.tree)
}

// Below etcd.MinTxnOps a claim alone is too large: it is refused,
// changes nothing, and says what fencectl needs.
func TestEtcdSmallTxnOps_BelowTheMinimum(t *testing.T) {
	c := etcdtest.StartWith(t, 1, etcdtest.Options{MaxTxnOps: 8})
	cfg := journal.Config{Backend: "etcd", Endpoints: c.Endpoints(), Prefix: smallPrefix}
	root := filepath.Join(t.TempDir(), "tree")
	if _, err := fence.InitTree(root, testDefaults, fence.Options{Journal: &cfg}); err != nil {
		t.Fatalf("init on etcd --max-txn-ops 8: %v", err)
	}
	tree, err := fence.Open(root, fence.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tree.Close() })
	add(t, tree, "t1", 0)
	before := snap(t, tree)
	_, err = tree.Claim(bg, fence.ClaimRequest{Agent: "a"})
	if !errors.Is(err, journal.ErrTooLarge) {
		t.Fatalf("claim on etcd --max-txn-ops 8: %v, want journal.ErrTooLarge", err)
	}
	if want := fmt.Sprintf("fencectl needs %d at least", etcdstore.MinTxnOps); !strings.Contains(err.Error(), want) {
		t.Errorf("the refusal does not say %q: %v", want, err)
	}
	unchanged(t, tree, before, "a claim refused as too large")
}

// Compact on an etcd at the minimum: thirty finished tasks with long
// histories (claimed twice, heartbeats under each claim) are folded a few
// per commit and their events dropped a few per commit, each commit
// inside the limit. The journal reads as before: replay --check agrees,
// the last token of a folded task is refused as it was (stale, and how
// its lease ended), and an earlier one as not held, naming its task.
func TestEtcdSmallTxnOps_CompactLongHistories(t *testing.T) {
	const n, beats = 30, 10
	const perTask = 1 + 2*(beats+2) // add; twice: claim, heartbeats, release or complete
	s := newSmallEtcd(t)
	type tokens struct{ early, last uint64 }
	tok := map[string]tokens{}
	for i := range n {
		id := fmt.Sprintf("t%02d", i)
		add(t, s.tree, id, 0)
		var tk tokens
		for round, agent := range []string{"a", "b"} {
			c := claim(t, s.tree, id, agent)
			req := fence.FencedRequest{ID: id, Token: c.Token, Agent: agent}
			for range beats {
				if _, err := s.tree.Heartbeat(bg, req); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if round == 0 {
				_, err = s.tree.Release(bg, req)
				tk.early = c.Token
			} else {
				_, err = s.tree.Complete(bg, req)
				tk.last = c.Token
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		tok[id] = tk
	}
	refusal := func(token uint64) fence.StaleTokenError {
		t.Helper()
		_, err := s.tree.Claim(bg, fence.ClaimRequest{Token: token, Agent: "x"})
		stale, ok := errors.AsType[*fence.StaleTokenError](err)
		if !ok {
			t.Fatalf("claim --token %d: %v, want a stale token refusal", token, err)
		}
		return *stale
	}
	before := map[uint64]fence.StaleTokenError{}
	for _, tk := range tok {
		before[tk.last] = refusal(tk.last)
	}

	rep, err := s.tree.Compact(bg, fence.CompactRequest{Agent: "ops"})
	if err != nil {
		t.Fatalf("compact of %d tasks of %d events each: %v", n, perTask, err)
	}
	if rep.Tasks != n || rep.Events != n*perTask || rep.Claims != 2*n {
		t.Errorf("compact folded %d tasks, dropped %d events and %d claims; want %d, %d and %d", rep.Tasks, rep.Events, rep.Claims, n, n*perTask, 2*n)
	}
	check, err := s.tree.Replay(bg, true)
	if err != nil {
		t.Fatalf("replay --check after compact: %v", err)
	}
	for _, f := range check.Findings {
		t.Errorf("replay --check after compact: %s", f.Describe())
	}
	for id, tk := range tok {
		if got := refusal(tk.last); got != before[tk.last] {
			t.Errorf("claim --token %d (%s's last) after compact: %+v, before it: %+v", tk.last, id, got, before[tk.last])
		}
		if got := refusal(tk.early); got.Reason != fence.ReasonNotHeld || got.Task != id {
			t.Errorf("claim --token %d (%s's first) after compact: %+v, want not held, naming %s", tk.early, id, got, id)
		}
	}
	checkInvariants(t, s.tree)
}
