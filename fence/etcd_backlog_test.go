package fence_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// Housekeeping larger than one etcd transaction (--max-txn-ops, 128 by
// default) must not wedge the tree. Every write first reaps the leases
// that ran out and promotes the waiting tasks that are due, in its own
// transaction: with hundreds of them at once (a fleet that died, retries
// whose backoff ends together) that transaction was refused, so every
// claim, add and complete failed, and the reaps a failed claim reported
// had not happened. Now the backlog is worked off in commits of its own
// first, and a refused claim reports no reap. compact, too, folds fewer
// tasks a commit when a commit of its usual size is too large.
func TestEtcdBacklog_ManyLeasesRunOutTogether(t *testing.T) {
	const n = 150
	r := newEtcdRig(t, 1, record.Defaults{TTL: time.Minute, MaxAttempts: 3, RetryBackoff: time.Second})
	tree := r.open(t, 10*time.Second)
	for i := range n {
		add(t, tree, fmt.Sprintf("t%03d", i), 0)
	}
	// --batch N is up to N: too many for one transaction, fewer are
	// claimed, never none.
	b, err := tree.ClaimBatch(bg, fence.BatchClaimRequest{Agent: "fleet", Count: n, TTL: time.Second})
	if err != nil {
		t.Fatalf("claim --batch %d: %v", n, err)
	}
	if len(b.Assigned) == 0 || len(b.Assigned) >= n {
		t.Fatalf("claim --batch %d claimed %d; want some but, on etcd's default limit, not all", n, len(b.Assigned))
	}
	claimAll := func(claimed int) {
		for claimed < n {
			b, err := tree.ClaimBatch(bg, fence.BatchClaimRequest{Agent: "fleet", Count: 8, TTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			claimed += len(b.Assigned)
		}
	}
	claimAll(len(b.Assigned))
	time.Sleep(2500 * time.Millisecond) // every lease runs out on etcd's clock
	// The next claim reaps all of them (in commits of its own), and takes
	// nothing: each reaped task backs off for a second.
	if _, err := tree.Claim(bg, fence.ClaimRequest{Agent: "next", TTL: time.Minute}); err != fence.ErrNothingToClaim {
		t.Fatalf("claim after %d leases ran out: %v, want nothing to claim (each backs off)", n, err)
	}
	counts := func() map[string]int {
		st, err := tree.Status(bg)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]int{"waiting": st.Counts[record.Waiting], "claimed": st.Counts[record.Claimed], "available": st.Counts[record.Available]}
	}
	if c := counts(); c["waiting"] != n || c["claimed"] != 0 {
		t.Fatalf("after the claim: %v, want all %d reaped to waiting", c, n)
	}
	// The backoffs end together: an add promotes them all first.
	time.Sleep(1500 * time.Millisecond)
	add(t, tree, "late", 0)
	if c := counts(); c["available"] != n+1 {
		t.Fatalf("after the add: %v, want all %d and the new task available", c, n)
	}
	// reap frees them all too, and says so for each.
	if _, err := tree.Claim(bg, fence.ClaimRequest{ID: "late", Agent: "fleet", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	claimAll(1)
	time.Sleep(2500 * time.Millisecond)
	reaped, err := tree.Reap(bg, false)
	if err != nil {
		t.Fatalf("reap of %d expired leases: %v", n+1, err)
	}
	if len(reaped) != n+1 {
		t.Errorf("reap reported %d leases, want %d", len(reaped), n+1)
	}
	if c := counts(); c["waiting"] != n+1 || c["claimed"] != 0 {
		t.Errorf("after reap: %v, want all %d waiting", c, n+1)
	}
	// Finished with a long history each (claims, reaps, retries),
	// compact folds them all: fewer a commit when a commit of its usual
	// size is too large.
	time.Sleep(3 * time.Second) // the second backoff (2 s, give or take) ends
	for done := 0; done < n+1; {
		b, err := tree.ClaimBatch(bg, fence.BatchClaimRequest{Agent: "fleet", Count: 8, TTL: time.Minute})
		if err != nil {
			t.Fatalf("claim after %d done: %v", done, err)
		}
		for _, c := range b.Assigned {
			if _, err := tree.Complete(bg, fence.FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: "fleet"}); err != nil {
				t.Fatal(err)
			}
			done++
		}
	}
	rep, err := tree.Compact(bg, fence.CompactRequest{Agent: "op"})
	if err != nil {
		t.Fatalf("compact of %d finished tasks: %v", n+1, err)
	}
	if rep.Tasks != n+1 {
		t.Errorf("compact folded %d tasks, want %d", rep.Tasks, n+1)
	}
	checkInvariants(t, tree)
}
