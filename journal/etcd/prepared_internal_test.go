package etcd

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// preparedTree adds n ready tasks t00… and returns a fresh handle on
// them (its cache cold) and the time the records carry.
func preparedTree(t *testing.T, n int) (journal.Config, string, journal.Store, time.Time) {
	t.Helper()
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	now := time.Now()
	putAvailable(t, s, n, now)
	_, s = open(t, cfg, dir)
	return cfg, dir, s, now
}

var errNothingReady = errors.New("nothing ready")

// claimNext claims the first ready task in one transaction (as fence's
// claim-next does) and returns it and the requests that run made before
// its commit.
func claimNext(t *testing.T, s journal.Store, now time.Time) (id string, requests int, err error) {
	t.Helper()
	err = s.(journal.Prefetcher).UpdateReading(nil, true, func(jt journal.Tx) error {
		tx := jt.(*Tx)
		var rec record.Task
		tx.Ready(func(cand string) bool {
			r, ok, err := tx.Task(cand)
			if err != nil || !ok {
				return true
			}
			rec = r
			return false
		})
		if rec.ID == "" {
			return errNothingReady
		}
		old := rec
		rec.State = record.Claimed
		rec.Lease = &record.Lease{Token: rec.Seq, Agent: "a", ClaimedAt: now, Deadline: now.Add(time.Hour), TTL: time.Hour}
		id, requests = rec.ID, tx.requests
		return tx.PutTask(&old, rec)
	})
	return id, requests, err
}

// complete completes claimed task id in one transaction that reads its
// record, its lease and its dependents (as fence's complete does), and
// returns the requests that run made before its commit. A lease etcd
// ended is refused, as fence refuses it.
func complete(t *testing.T, s journal.Store, id string, now time.Time) (requests int, err error) {
	t.Helper()
	err = s.(journal.Prefetcher).UpdateReading([]string{id}, false, func(jt journal.Tx) error {
		tx := jt.(*Tx)
		rec, ok, err := tx.Task(id)
		if err != nil || !ok {
			return fmt.Errorf("Task(%s) = %v, %v", id, ok, err)
		}
		if rec.State != record.Claimed || !rec.Lease.Deadline.After(tx.Now()) {
			return errLeaseEnded
		}
		if err := tx.Dependents(id, func(string) bool { return true }); err != nil {
			return err
		}
		old := rec
		rec.State, rec.Lease = record.Done, nil
		requests = tx.requests
		return tx.PutTask(&old, rec)
	})
	return requests, err
}

var errLeaseEnded = errors.New("lease ended")

// TestPrepared_GroupsOfOneHandleReadNothingBeforeTheirCommit: a handle
// that commits group after group, with fence's Head between them, begins
// each write on the snapshot Head read, and finds the liveness keys of
// its own claims and the (empty) dependents index in its cache: a
// complete of its own claim, and a claim of a candidate whose record it
// read ahead, make no request before their commit.
func TestPrepared_GroupsOfOneHandleReadNothingBeforeTheirCommit(t *testing.T) {
	_, _, s, now := preparedTree(t, 40)
	var zero, runs int
	prev := ""
	for i := range 30 {
		id, req, err := claimNext(t, s, now)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("t%02d", i); id != want {
			t.Fatalf("claim %d took %s; want %s", i, id, want)
		}
		if _, err := s.Head(); err != nil {
			t.Fatal(err)
		}
		if prev != "" {
			creq, err := complete(t, s, prev, now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Head(); err != nil {
				t.Fatal(err)
			}
			runs += 2
			if req == 0 {
				zero++
			}
			if creq == 0 {
				zero++
			}
		}
		prev = id
	}
	if zero < runs*3/4 {
		t.Errorf("%d of %d transactions after a Head made no request before their commit; want most", zero, runs)
	}
	err := s.View(func(jt journal.Tx) error {
		if errs := jt.(*Tx).Check(); len(errs) > 0 {
			return errors.Join(errs...)
		}
		c := jt.Counts()
		if c[record.Done] != 29 || c[record.Claimed] != 1 || c[record.Available] != 10 {
			return fmt.Errorf("counts %v; want 29 done, 1 claimed, 10 available", c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPrepared_ARefusalIsReadAfresh: a run on a prepared snapshot that
// commits nothing does not answer: it is run again on a snapshot of its
// own. A task added by another writer after Head read the (empty) ready
// index is claimed, not refused as nothing to claim.
func TestPrepared_ARefusalIsReadAfresh(t *testing.T) {
	cfg, dir, s, now := preparedTree(t, 2)
	for range 2 {
		if _, _, err := claimNext(t, s, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Head(); err != nil {
		t.Fatal(err)
	}
	if s.(*Store).prepared.Load() == nil {
		t.Fatal("Head of a handle that committed twice prepared no snapshot")
	}
	_, other := open(t, cfg, dir)
	err := other.Update(func(tx journal.Tx) error {
		return tx.PutTask(nil, record.Task{ID: "late", State: record.Available, MaxAttempts: 3, Seq: 100, Created: now, Updated: now})
	})
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := claimNext(t, s, now)
	if err != nil || id != "late" {
		t.Fatalf("claim after another writer added a task = %q, %v; want late", id, err)
	}
}

// TestPrepared_ALeaseEtcdEndedIsNotTakenFromTheCache: a liveness key the
// handle wrote and etcd deleted since (its lease ran out, here
// ExpireLease on another handle) makes the commit that relied on the
// cached key fail, and the run again refuses the complete: the record is
// left as it was.
func TestPrepared_ALeaseEtcdEndedIsNotTakenFromTheCache(t *testing.T) {
	cfg, dir, s, now := preparedTree(t, 3)
	var ids []string
	for range 2 {
		id, _, err := claimNext(t, s, now)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := s.Head(); err != nil {
		t.Fatal(err)
	}
	_, other := open(t, cfg, dir)
	if err := other.(*Store).ExpireLease(ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := complete(t, s, ids[1], now); !errors.Is(err, errLeaseEnded) {
		t.Fatalf("complete of a lease etcd ended = %v; want it refused", err)
	}
	err := other.View(func(tx journal.Tx) error {
		rec, ok, err := tx.Task(ids[1])
		if err != nil || !ok || rec.State != record.Claimed {
			return fmt.Errorf("task %s after the refused complete: %v, %v, %v; want claimed, unchanged", ids[1], rec.State, ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
