package etcd

import (
	"errors"
	"testing"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// appendFor is one event of task id, appended in its own transaction by
// s: a commit that moves the head and nothing else a reader of another
// task looks at.
func appendFor(t *testing.T, s journal.Store, id string) {
	t.Helper()
	err := s.Update(func(tx journal.Tx) error {
		_, err := tx.Append(record.Event{Type: record.EvAdd, Task: id, To: record.Available})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRebase_HeadOnlyConflictRunsAgainWithoutReading: a commit that lost
// the race on the head alone (another client appended meanwhile) is run
// again at once on what it read, with the new head: no read request, no
// fresh snapshot, and the result carries the other's change (its seq is
// the next one after the other's).
func TestRebase_HeadOnlyConflictRunsAgainWithoutReading(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	_, other := open(t, cfg, dir)
	putTasks(t, s, 4)

	before := Rebases.Load()
	var runs []*Tx
	var seq uint64
	err := s.Update(func(jtx journal.Tx) error {
		tx := jtx.(*Tx)
		runs = append(runs, tx)
		if _, _, err := tx.Task("t01"); err != nil {
			return err
		}
		if len(runs) == 1 {
			appendFor(t, other, "elsewhere") // the race, lost on the head
		}
		ev, err := tx.Append(record.Event{Type: record.EvRelease, Task: "t01", To: record.Available})
		seq = ev.Seq
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || Rebases.Load()-before != 1 {
		t.Fatalf("%d runs, %d rebases; want 2 runs, the second a rebase", len(runs), Rebases.Load()-before)
	}
	if runs[1].requests != 0 || runs[1].rev != runs[0].rev {
		t.Fatalf("the rebased run made %d read requests at snapshot %d (first run's: %d); want none, on the same snapshot", runs[1].requests, runs[1].rev, runs[0].rev)
	}
	var last record.Event
	err = s.View(func(tx journal.Tx) error {
		return tx.EventsBackward(func(ev record.Event) (bool, error) { last = ev; return false, nil })
	})
	if err != nil || last.Task != "t01" || last.Seq != seq {
		t.Fatalf("last event %+v (%v); want t01's at seq %d, after the other's", last, err, seq)
	}
}

// TestRebase_OtherConflictReadsAfresh: when a key the run read changed
// too, the rebased commit cannot hold; the run is made again on a fresh
// snapshot that shows the change. Nothing of the stale runs commits.
func TestRebase_OtherConflictReadsAfresh(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	_, other := open(t, cfg, dir)
	putTasks(t, s, 4)

	var seen []uint64
	err := s.Update(func(tx journal.Tx) error {
		rec, _, err := tx.Task("t01")
		if err != nil {
			return err
		}
		seen = append(seen, rec.Seq)
		if len(seen) == 1 {
			// Another client changes the very record this run read.
			err := other.Update(func(otx journal.Tx) error {
				old, _, err := otx.Task("t01")
				if err != nil {
					return err
				}
				rec := old
				rec.Seq = 99
				if err := otx.PutTask(&old, rec); err != nil {
					return err
				}
				_, err = otx.Append(record.Event{Type: record.EvRelease, Task: "t01", To: record.Available})
				return err
			})
			if err != nil {
				return errors.Join(errors.New("the other's update"), err)
			}
		}
		_, err = tx.Append(record.Event{Type: record.EvRelease, Task: "t01", To: record.Available})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(seen); n < 2 || seen[n-1] != 99 {
		t.Fatalf("runs saw seq %v; the last run must see the other's change (99)", seen)
	}
}

// TestSpread_LoserTakesAnotherCandidate: a claim's run after a lost race
// (spread > 0) starts from a random one of the first page's top-priority
// tasks; a first run always takes the first.
func TestSpread_LoserTakesAnotherCandidate(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	putTasks(t, s, 32) // t03, t05, … are ready, oldest first (t01 waits for t00)

	first := func(spread int) string {
		var id string
		err := s.Update(func(jtx journal.Tx) error {
			tx := jtx.(*Tx)
			tx.spread = spread
			tx.Ready(func(c string) bool { id = c; return false })
			return errNoWrite
		})
		if !errors.Is(err, errNoWrite) {
			t.Fatal(err)
		}
		return id
	}
	for range 5 {
		if id := first(0); id != "t03" {
			t.Fatalf("a first run took %s; want t03, the oldest ready", id)
		}
	}
	other := false
	for range 40 {
		other = other || first(1) != "t03"
	}
	if !other {
		t.Fatal("40 runs after a lost race all took t03: the losers would meet again")
	}
}

var errNoWrite = errors.New("nothing to write")
