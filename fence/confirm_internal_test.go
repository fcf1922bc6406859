package fence

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
	"github.com/fencectl/fencectl/journal/record"
)

// TestFinishMove_OldSnapshotLeavesANewerClaimsFileAlone: host A reads
// t1 as available, then host B claims it (commit, then its file moves to
// claimed/). A, still on its old snapshot, finds t1's file out of place:
// it must neither move B's file back to available/ nor refuse a claim as
// "task file missing". Its run is spoiled and made again, and sees t1
// claimed.
//
// A may have learnt of t1 from its record or only from the ready index,
// as a claim of the next task does. Before, the second moved B's file
// back: nothing A's run had read of t1 was checked, so the snapshot was
// "confirmed" (8 claim processes on one etcd tree did it on every lost
// race, and a complete then met its file in flux and failed).
func TestFinishMove_OldSnapshotLeavesANewerClaimsFileAlone(t *testing.T) {
	for _, read := range []struct {
		name string
		t1   func(tx journal.Tx) (record.State, error)
	}{
		{"record", func(tx journal.Tx) (record.State, error) {
			rec, _, err := tx.Task("t1")
			return rec.State, err
		}},
		{"ready index", func(tx journal.Tx) (record.State, error) {
			state := record.Claimed // t1 not in the ready index: taken
			tx.Ready(func(id string) bool {
				if id == "t1" {
					state = record.Available
				}
				return id != "t1"
			})
			return state, nil
		}},
	} {
		t.Run(read.name, func(t *testing.T) { oldSnapshotMeetsNewerClaim(t, read.t1) })
	}
}

func oldSnapshotMeetsNewerClaim(t *testing.T, readT1 func(tx journal.Tx) (record.State, error)) {
	c := etcdtest.Start(t, 1)
	root := filepath.Join(t.TempDir(), "tree")
	cfg := journal.Config{Backend: "etcd", Endpoints: c.Endpoints(), Prefix: "/confirm"}
	if _, err := InitTree(root, record.Defaults{TTL: time.Hour, MaxAttempts: 3}, Options{Journal: &cfg}); err != nil {
		t.Fatal(err)
	}
	open := func() *Tree {
		tree, err := Open(root, Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tree.Close() })
		return tree
	}
	a, b := open(), open()
	ctx := context.Background()
	if _, err := a.Add(ctx, AddRequest{ID: "t1"}); err != nil {
		t.Fatal(err)
	}

	var states []record.State
	var moved []bool
	var refusals []error
	_, _, err := a.write(ctx, "test", func(tx journal.Tx, now time.Time) ([]record.Event, error) {
		state, err := readT1(tx)
		if err != nil {
			return nil, err
		}
		states = append(states, state)
		if len(states) > 1 {
			return nil, errNoChange
		}
		if _, err := b.Claim(ctx, ClaimRequest{ID: "t1", Agent: "host-b"}); err != nil {
			t.Fatalf("host B's claim: %v", err)
		}
		moved = append(moved, a.finishMove(tx, "t1", fsmirror.Available))
		refusal := a.confirmed(tx, a.checkFile("t1", fsmirror.Available, true))
		refusals = append(refusals, refusal)
		return nil, refusal
	})
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if len(moved) != 1 || moved[0] {
		t.Fatalf("finishMove on the old snapshot moved the file: %v", moved)
	}
	if ok, err := a.mirror.Exists(fsmirror.Claimed, "t1"); err != nil || !ok {
		t.Fatalf("t1's file is not in claimed/ where host B's claim put it (%v)", err)
	}
	var tfe *TaskFileError
	if len(refusals) != 1 || errors.As(refusals[0], &tfe) {
		t.Fatalf("on the old snapshot the file check answered %v; want the run spoiled, not a refusal", refusals)
	}
	if len(states) != 2 || states[1] != record.Claimed {
		t.Fatalf("runs saw t1 as %v; want a second run that sees it claimed", states)
	}
}
