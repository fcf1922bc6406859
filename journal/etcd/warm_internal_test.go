package etcd

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
	"github.com/fencectl/fencectl/journal/record"
)

// newJournal makes an empty journal at a prefix of its own and returns
// its config and meta directory.
func newJournal(t *testing.T) (journal.Config, string) {
	t.Helper()
	cfg := journal.Config{Backend: "etcd", Endpoints: etcdtest.Start(t, 1).Endpoints(), Prefix: "/warm"}
	dir := filepath.Join(t.TempDir(), ".fence")
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lock, err := b.LockTree(dir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	if err := lock.Create(record.Defaults{TTL: time.Minute, MaxAttempts: 3}, 1); err != nil {
		t.Fatal(err)
	}
	return cfg, dir
}

func open(t *testing.T, cfg journal.Config, dir string) (*Backend, journal.Store) {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if ok, err := b.Exists(dir); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	s, err := b.Open(dir, journal.OpenOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

func addTask(t *testing.T, s journal.Store, rec record.Task) {
	t.Helper()
	err := s.Update(func(tx journal.Tx) error { return tx.PutTask(nil, rec) })
	if err != nil {
		t.Fatal(err)
	}
}

var errAbsent = errors.New("absent")

// A write that starts from the warm snapshot (what Exists read) and does
// not commit is run again on a fresh one: a refusal is never based on a
// state older than the call. Here another client adds the task after
// Exists; an Update that would refuse for want of it must see it.
func TestWarm_RefusalIsCheckedAfresh(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir) // Exists kept a snapshot without the task
	_, other := open(t, cfg, dir)
	addTask(t, other, record.Task{ID: "late", State: record.Available, Seq: 1})

	runs, warmRuns := 0, 0
	err := s.Update(func(jt journal.Tx) error {
		runs++
		if jt.(*Tx).warm != nil {
			warmRuns++
		}
		_, ok, err := jt.Task("late")
		if err == nil && !ok {
			err = errAbsent
		}
		return err
	})
	if err != nil {
		t.Fatalf("Update refused from a snapshot older than the call: %v (runs %d)", err, runs)
	}
	if warmRuns != 1 || runs != 2 {
		t.Fatalf("runs %d (warm %d); want the warm run, then one fresh", runs, warmRuns)
	}
}

// A write that commits from the warm snapshot is checked by the commit:
// a change since then makes it run again, and what it read is current.
func TestWarm_CommitIsChecked(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	_, other := open(t, cfg, dir)
	addTask(t, other, record.Task{ID: "a", State: record.Available, Seq: 1})

	var seen []int
	err := s.Update(func(tx journal.Tx) error {
		seen = append(seen, tx.Counts()[record.Available])
		_, err := tx.Append(record.Event{Type: record.EvAdd, Task: "b", To: record.Available})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != 0 || seen[1] != 1 {
		t.Fatalf("available counts seen by the runs: %v; want [0 1] (the warm run's commit fails, the fresh run sees the add)", seen)
	}
}

// The steps on a claim read the task and then the claim of its token:
// one round trip after begin, not two (prefetchClaim).
func TestWarm_TaskReadsItsClaimAlong(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	const token = 77
	deadline := time.Now().Add(time.Minute)
	err := s.Update(func(tx journal.Tx) error {
		rec := record.Task{ID: "x", State: record.Claimed, Seq: 1, Attempts: 1,
			Lease: &record.Lease{Token: token, Agent: "a", Deadline: deadline, TTL: time.Minute}}
		if err := tx.PutTask(nil, rec); err != nil {
			return err
		}
		return tx.PutClaim(record.Claim{Token: token, Task: "x", Agent: "a"})
	})
	if err != nil {
		t.Fatal(err)
	}
	_, s2 := open(t, cfg, dir) // a new process: nothing cached
	err = s2.Update(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		if err := tx.begin(); err != nil {
			return err
		}
		before := tx.requests
		rec, ok, err := tx.Task("x")
		if err != nil || !ok || rec.Lease == nil || rec.Lease.Token != token {
			t.Fatalf("Task = %+v, %v, %v", rec, ok, err)
		}
		if c, ok, err := tx.Claim(token); err != nil || !ok || c.Task != "x" {
			t.Fatalf("Claim = %+v, %v, %v", c, ok, err)
		}
		if n := tx.requests - before; n != 1 {
			t.Errorf("Task then Claim took %d requests; want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
