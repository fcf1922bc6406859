package fence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// Every bad batch request is refused before anything is read or written,
// naming the input at fault.
func TestClaimBatch_BadRequests(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "a", 0)
	before := snap(t, tree)
	for _, tc := range []struct {
		name  string
		req   fence.BatchClaimRequest
		input fence.Input
		rule  fence.Rule
	}{
		{"nothing asked", fence.BatchClaimRequest{}, fence.InputBatch, fence.RuleRange},
		{"negative count", fence.BatchClaimRequest{Count: -1}, fence.InputBatch, fence.RuleRange},
		{"ids and count", fence.BatchClaimRequest{IDs: []string{"a"}, Count: 2}, fence.InputBatch, fence.RuleConflict},
		{"too many", fence.BatchClaimRequest{Count: fence.MaxBatch + 1}, fence.InputBatch, fence.RuleRange},
		{"partial without ids", fence.BatchClaimRequest{Count: 2, Partial: true}, fence.InputBatch, fence.RuleConflict},
		{"named twice", fence.BatchClaimRequest{IDs: []string{"a", "a"}}, fence.InputID, fence.RuleConflict},
		{"bad id", fence.BatchClaimRequest{IDs: []string{"a", "../x"}}, fence.InputID, fence.RuleFormat},
		{"negative wait", fence.BatchClaimRequest{Count: 1, Wait: -1}, fence.InputWait, fence.RuleRange},
		{"negative ttl", fence.BatchClaimRequest{Count: 1, TTL: -1}, fence.InputTTL, fence.RuleRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tree.ClaimBatch(context.Background(), tc.req)
			var inv *fence.InvalidInputError
			if !errors.As(err, &inv) || inv.Input != tc.input || inv.Rule != tc.rule {
				t.Fatalf("ClaimBatch(%+v) = %v; want invalid %s (%s)", tc.req, err, tc.input, tc.rule)
			}
		})
	}
	unchanged(t, tree, before, "bad batch requests")
}

// A named batch is all or nothing; with Partial it claims what it can;
// each task gets its own token, and a token fences only its own task.
func TestClaimBatch_AllOrNothingAndPartial(t *testing.T) {
	ctx := context.Background()
	tree := newTree(t)
	for _, id := range []string{"a", "b", "c"} {
		add(t, tree, id, 0)
	}
	claim(t, tree, "b", "first")
	before := snap(t, tree)
	_, err := tree.ClaimBatch(ctx, fence.BatchClaimRequest{IDs: []string{"a", "b", "zz"}, Agent: "x"})
	var be *fence.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 2 || be.Failed[0].ID != "b" || be.Failed[1].ID != "zz" {
		t.Fatalf("batch with b claimed and zz unknown = %v; want a BatchError naming b and zz", err)
	}
	var na *fence.NotAvailableError
	var ns *fence.NoSuchTaskError
	if !errors.As(be.Failed[0].Err, &na) || !errors.As(be.Failed[1].Err, &ns) {
		t.Fatalf("reasons %v, %v; want not available, no such task", be.Failed[0].Err, be.Failed[1].Err)
	}
	unchanged(t, tree, before, "an all-or-nothing batch refused")

	res, err := tree.ClaimBatch(ctx, fence.BatchClaimRequest{IDs: []string{"a", "b", "c"}, Agent: "x", Partial: true})
	if err != nil || len(res.Assigned) != 2 || len(res.Failed) != 1 || res.Failed[0].ID != "b" {
		t.Fatalf("partial batch = %+v, %v; want a and c claimed, b reported", res, err)
	}
	a, c := res.Assigned[0], res.Assigned[1]
	if a.Task.ID != "a" || c.Task.ID != "c" || a.Token == c.Token || c.Token <= a.Token {
		t.Fatalf("assigned %s/%d and %s/%d; want a then c, distinct increasing tokens", a.Task.ID, a.Token, c.Task.ID, c.Token)
	}
	fileAt(t, tree, "a", record.Claimed)
	fileAt(t, tree, "c", record.Claimed)
	if _, err := tree.Complete(ctx, fence.FencedRequest{ID: "a", Token: c.Token}); staleErr(t, err) == nil {
		t.Fatal("c's token completed a")
	}
	if _, err := tree.Complete(ctx, fence.FencedRequest{ID: "a", Token: a.Token}); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, tree)
}

// --batch N takes up to N ready tasks in claim order (priority, then age),
// and reports nothing to claim when none is ready.
func TestClaimBatch_NextN(t *testing.T) {
	ctx := context.Background()
	tree := newTree(t)
	add(t, tree, "old", 0)
	add(t, tree, "urgent", 9)
	add(t, tree, "new", 0)
	res, err := tree.ClaimBatch(ctx, fence.BatchClaimRequest{Count: 2, Agent: "x"})
	if err != nil || len(res.Assigned) != 2 || res.Assigned[0].Task.ID != "urgent" || res.Assigned[1].Task.ID != "old" {
		t.Fatalf("next 2 = %+v, %v; want urgent then old", res.Assigned, err)
	}
	res, err = tree.ClaimBatch(ctx, fence.BatchClaimRequest{Count: 5, Agent: "x"})
	if err != nil || len(res.Assigned) != 1 || res.Assigned[0].Task.ID != "new" {
		t.Fatalf("next 5 of 1 ready = %+v, %v; want new", res.Assigned, err)
	}
	if _, err := tree.ClaimBatch(ctx, fence.BatchClaimRequest{Count: 1, Agent: "x"}); !errors.Is(err, fence.ErrNothingToClaim) {
		t.Fatalf("next 1 of none = %v; want nothing to claim", err)
	}
	checkInvariants(t, tree)
}
