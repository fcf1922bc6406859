package etcd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// addReady puts available tasks ids (seq seq0, seq0+1, …) of priority
// prio in one transaction.
func addReady(t *testing.T, s journal.Store, prio int64, seq0 uint64, ids ...string) {
	t.Helper()
	now := time.Now()
	err := s.Update(func(tx journal.Tx) error {
		for i, id := range ids {
			rec := record.Task{ID: id, State: record.Available, MaxAttempts: 3, Priority: prio, Seq: seq0 + uint64(i), Created: now, Updated: now}
			if err := tx.PutTask(nil, rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// claimFirst claims the first ready task in one transaction, as a claim
// does (reap first, then the first ready task), and returns its id.
func claimFirst(t *testing.T, s journal.Store) string {
	t.Helper()
	var got string
	err := s.Update(func(tx journal.Tx) error {
		got = ""
		tx.Expired(tx.Now())
		tx.Ready(func(id string) bool { got = id; return false })
		if got == "" {
			return nil
		}
		return claimIn(tx, got)
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantClaims claims the first ready task once per id in want, and fails
// unless each claim took the task want names ("": none left).
func wantClaims(t *testing.T, s journal.Store, want ...string) {
	t.Helper()
	for i, id := range want {
		if got := claimFirst(t, s); got != id {
			t.Fatalf("claim %d of %v took %q, want %q", i+1, want, got, id)
		}
	}
}

// claimIn claims id in tx, with an hour's lease.
func claimIn(tx journal.Tx, id string) error {
	old, ok, err := tx.Task(id)
	if err != nil || !ok {
		return fmt.Errorf("task %s: %v, %v", id, ok, err)
	}
	rec := old
	rec.State = record.Claimed
	now := tx.Now()
	rec.Lease = &record.Lease{Token: old.Seq + 1000, Agent: "a", ClaimedAt: now, Deadline: now.Add(time.Hour), TTL: time.Hour}
	return tx.PutTask(&old, rec)
}

// floorOf reads the floor a new transaction of s starts its ready scans
// from.
func floorOf(t *testing.T, s journal.Store) string {
	t.Helper()
	var f string
	err := s.View(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		tx.Counts()
		f = tx.floor
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFloor_ScansStartPastClaimedTasks: claims move the ready index's
// floor past the keys they deleted, so a later transaction, on this
// handle or a new one, reads the first ready page from the first live
// key instead of walking every claimed task's tombstone from the start.
func TestFloor_ScansStartPastClaimedTasks(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf("t%02d", i))
	}
	addReady(t, s, 0, 1, ids...)
	for i := range 8 {
		if got := claimFirst(t, s); got != ids[i] {
			t.Fatalf("claim %d took %q, want %q", i, got, ids[i])
		}
	}
	want := floorOf(t, s)
	if want <= readyKey(0, 8) || want > readyKey(0, 9) {
		t.Fatalf("floor after 8 claims = %x; want past t07's ready key %x, at most t08's %x", want, readyKey(0, 8), readyKey(0, 9))
	}
	_, fresh := open(t, cfg, dir)
	err := fresh.Update(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		var first string
		tx.Ready(func(id string) bool { first = id; return false })
		if first != "t08" {
			t.Errorf("a new handle's first ready task is %q, want t08", first)
		}
		from := tx.key(famReady, "")
		for k := range tx.pages {
			if strings.HasPrefix(k.from, from) && k.from != from+want {
				t.Errorf("read a ready page from %x; want every page read from the floor %x", k.from, from+want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFloor_HigherPriorityTaskBelowTheFloorIsClaimedFirst: a ready key
// put below the floor (a task of higher priority, or an old task handed
// back) lowers it, so the next claim sees it first.
func TestFloor_HigherPriorityTaskBelowTheFloorIsClaimedFirst(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	addReady(t, s, 0, 1, "a0", "a1", "a2", "a3")
	claimFirst(t, s)
	claimFirst(t, s)
	_, other := open(t, cfg, dir)
	addReady(t, other, 5, 100, "urgent")
	wantClaims(t, s, "urgent", "a2")
}

// TestFloor_AddDuringARebaseIsNotHidden: a claim that loses the race on
// the head to an add of a higher-priority task must not be rebased onto
// the new head with its old choice (its scan started above the new task,
// which it never saw): it runs afresh and takes the new task.
func TestFloor_AddDuringARebaseIsNotHidden(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	_, other := open(t, cfg, dir)
	addReady(t, s, 0, 1, "a0", "a1", "a2", "a3")
	claimFirst(t, s)
	claimFirst(t, s) // the floor is a2's key now

	runs := 0
	var got string
	err := s.Update(func(tx journal.Tx) error {
		runs++
		got = ""
		tx.Ready(func(id string) bool { got = id; return false })
		if runs == 1 {
			addReady(t, other, 5, 100, "urgent") // commits before this run does
		}
		return claimIn(tx, got)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != "urgent" {
		t.Fatalf("the claim that raced an add of a priority-5 task took %q after %d runs; want urgent", got, runs)
	}
	wantClaims(t, s, "a2")
}

// TestFloor_OlderWriterIsNotTrusted: a commit by an older fencectl
// rewrites the head but not the floor, and may put a ready key below it;
// a floor whose mod revision is not the head's is ignored, so that task
// is claimed in order.
func TestFloor_OlderWriterIsNotTrusted(t *testing.T) {
	cfg, dir := newJournal(t)
	b, s := open(t, cfg, dir)
	addReady(t, s, 0, 1, "a0", "a1", "a2")
	claimFirst(t, s)
	claimFirst(t, s)

	// What an older fencectl's add of a priority-5 task writes: the
	// record, its ready key, the head; no floor.
	ctx := context.Background()
	p := cfg.Prefix
	now := time.Now()
	rec := record.Task{ID: "old", State: record.Available, MaxAttempts: 3, Priority: 5, Seq: 50, Created: now, Updated: now}
	resp, err := b.cli.Get(ctx, p+famMeta+metaHead)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("head: %v", err)
	}
	h, err := decodeHead(string(resp.Kvs[0].Value))
	if err != nil {
		t.Fatal(err)
	}
	h.Counts[0]++
	_, err = b.cli.Txn(ctx).Then(
		clientv3.OpPut(p+famTask+"old", string(journal.EncodeTask(rec))),
		clientv3.OpPut(p+famReady+readyKey(5, 50), "old"),
		clientv3.OpPut(p+famMeta+metaHead, h.encode()),
	).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if f := floorOf(t, s); f != "" {
		t.Fatalf("floor after an older writer's commit = %x, want none trusted", f)
	}
	// The next add finds a floor again: the first live key, the older
	// writer's task, not its own key nor a2's.
	addReady(t, s, 0, 60, "late")
	if f := floorOf(t, s); f != readyKey(5, 50) {
		t.Fatalf("floor after an add = %x, want the older writer's task's key %x", f, readyKey(5, 50))
	}
	wantClaims(t, s, "old", "a2", "late") // old: the older writer's priority-5 task
}

// TestFloor_AddsSetTheFloor: the adds that fill a new tree set a floor
// (the first live ready key), so that each add's snapshot reads one
// window of the ready index (window.go), not the whole index, which etcd
// walks to count it: filling a tree of n tasks cost O(n²).
func TestFloor_AddsSetTheFloor(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	addReady(t, s, 0, 1, "a0", "a1")
	if f := floorOf(t, s); f != readyKey(0, 1) {
		t.Fatalf("floor after the first add = %x, want a0's key %x", f, readyKey(0, 1))
	}
	for i := range 4 {
		addReady(t, s, 0, uint64(3+readySpan*i), fmt.Sprintf("b%d", i))
	}
	addReady(t, s, 2, 999, "urgent")
	if f := floorOf(t, s); f != readyKey(2, 999) {
		t.Fatalf("floor after a higher priority's add = %x, want its key %x", f, readyKey(2, 999))
	}
	_, fresh := open(t, cfg, dir)
	err := fresh.Update(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		if err := tx.PutTask(nil, record.Task{ID: "c", State: record.Available, MaxAttempts: 3, Seq: 2000, Created: time.Now(), Updated: time.Now()}); err != nil {
			return err
		}
		from := tx.key(famReady, "")
		for k := range tx.pages {
			if strings.HasPrefix(k.from, from) && k.hi == rangeEnd(from) {
				t.Errorf("an add read the ready index from %x to its end; want one window from the floor %x", k.from, readyKey(2, 999))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantClaims(t, s, "urgent", "a0", "a1", "b0", "b1", "b2", "b3", "c", "")
}

// TestWindow_ScanCrossesGapsAndPriorities: the ready index is read a
// window of seqs at a time (window.go), never to its end while the first
// window has keys; a scan still visits every ready task in claim order,
// across gaps in the seqs wider than a window and across priorities.
func TestWindow_ScanCrossesGapsAndPriorities(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	addReady(t, s, 0, 1, "s1", "s2")
	addReady(t, s, 0, 1000, "s1000")
	addReady(t, s, 0, 5000, "s5000")
	addReady(t, s, 0, 5001, "s5001")
	addReady(t, s, -1, 3, "low")
	addReady(t, s, 2, 7000, "high")
	claimFirst(t, s) // high; the floor is a full key now

	err := s.Update(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		var got []string
		tx.Ready(func(id string) bool { got = append(got, id); return true })
		want := []string{"s1", "s2", "s1000", "s5000", "s5001", "low"}
		if !slices.Equal(got, want) {
			t.Errorf("Ready visited %v, want %v", got, want)
		}
		first := tx.firstReadyPageKey()
		if end := rangeEnd(tx.key(famReady, "")); first.hi >= end {
			t.Errorf("the first ready page was read to the index's end; want to its window's")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantClaims(t, s, "s1", "s2", "s1000", "s5000", "s5001", "low", "")
}
