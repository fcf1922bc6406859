package bolt_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

// appendN appends one event per task id in one transaction and returns
// them as stored.
func appendN(t *testing.T, db *boltstore.DB, typ record.EventType, ids ...string) []record.Event {
	t.Helper()
	var out []record.Event
	update(t, db, func(tx journal.Tx) error {
		for _, id := range ids {
			ev, err := tx.Append(record.Event{Time: t0, Type: typ, Task: id, To: record.Available})
			if err != nil {
				return err
			}
			out = append(out, ev)
		}
		return nil
	})
	return out
}

func seqs(evs []record.Event) []uint64 {
	var s []uint64
	for _, ev := range evs {
		s = append(s, ev.Seq)
	}
	return s
}

func TestEvents_AppendAssignsSeq(t *testing.T) {
	db, _ := newJournal(t)
	update(t, db, func(tx journal.Tx) error {
		if tx.(*boltstore.Tx).NextSeq() != 1 {
			t.Errorf("NextSeq of an empty log = %d, want 1", tx.(*boltstore.Tx).NextSeq())
		}
		dl := t0.Add(time.Minute)
		in := record.Event{Seq: 777, Time: t0, Type: record.EvClaim, Task: "t1", From: record.Available, To: record.Claimed,
			Agent: "a", Token: 99, Reason: "r", Deadline: &dl, Priority: 3, MaxAttempts: 4, RequestID: "q", Staged: "s", Source: "inbox"}
		ev, err := tx.Append(in)
		if err != nil {
			return err
		}
		if ev.Seq != 1 {
			t.Errorf("first Append got seq %d, want 1 (the caller's Seq is ignored)", ev.Seq)
		}
		if tx.(*boltstore.Tx).NextSeq() != 2 {
			t.Errorf("NextSeq after one Append = %d, want 2", tx.(*boltstore.Tx).NextSeq())
		}
		var stored []record.Event
		if err := tx.Events(1, func(e record.Event) (bool, error) { stored = append(stored, e); return true, nil }); err != nil {
			return err
		}
		in.Seq = 1
		if len(stored) != 1 || !reflect.DeepEqual(stored[0], in) {
			t.Errorf("stored event = %+v, want %+v", stored, in)
		}
		return nil
	})
	evs := appendN(t, db, record.EvAdd, "a", "b")
	if got := seqs(evs); !reflect.DeepEqual(got, []uint64{2, 3}) {
		t.Errorf("seqs of the next transaction = %v, want [2 3]", got)
	}
}

func TestEvents_ForwardAndBackward(t *testing.T) {
	db, _ := newJournal(t)
	appendN(t, db, record.EvAdd, "a", "b", "c")
	appendN(t, db, record.EvAdd, "d", "e")
	view(t, db, func(tx journal.Tx) error {
		var fw []string
		if err := tx.Events(1, func(e record.Event) (bool, error) { fw = append(fw, e.Task); return true, nil }); err != nil {
			return err
		}
		if want := []string{"a", "b", "c", "d", "e"}; !reflect.DeepEqual(fw, want) {
			t.Errorf("Events(1) = %v, want %v", fw, want)
		}
		var from3 []uint64
		if err := tx.Events(3, func(e record.Event) (bool, error) { from3 = append(from3, e.Seq); return true, nil }); err != nil {
			return err
		}
		if want := []uint64{3, 4, 5}; !reflect.DeepEqual(from3, want) {
			t.Errorf("Events(3) = %v, want %v", from3, want)
		}
		var stop []uint64
		if err := tx.Events(1, func(e record.Event) (bool, error) { stop = append(stop, e.Seq); return e.Seq < 2, nil }); err != nil {
			return err
		}
		if want := []uint64{1, 2}; !reflect.DeepEqual(stop, want) {
			t.Errorf("Events stopping after seq 2 = %v, want %v", stop, want)
		}
		var none int
		if err := tx.Events(6, func(record.Event) (bool, error) { none++; return true, nil }); err != nil {
			return err
		}
		if none != 0 {
			t.Errorf("Events past the end called fn %d times", none)
		}
		var bw []string
		if err := tx.EventsBackward(func(e record.Event) (bool, error) { bw = append(bw, e.Task); return true, nil }); err != nil {
			return err
		}
		if want := []string{"e", "d", "c", "b", "a"}; !reflect.DeepEqual(bw, want) {
			t.Errorf("EventsBackward = %v, want %v", bw, want)
		}
		var bw2 []uint64
		if err := tx.EventsBackward(func(e record.Event) (bool, error) { bw2 = append(bw2, e.Seq); return len(bw2) < 2, nil }); err != nil {
			return err
		}
		if want := []uint64{5, 4}; !reflect.DeepEqual(bw2, want) {
			t.Errorf("EventsBackward stopping after two = %v, want %v", bw2, want)
		}
		boom := errors.New("boom")
		if err := tx.Events(1, func(record.Event) (bool, error) { return true, boom }); !errors.Is(err, boom) {
			t.Errorf("Events did not pass fn's error on: %v", err)
		}
		if err := tx.EventsBackward(func(record.Event) (bool, error) { return true, boom }); !errors.Is(err, boom) {
			t.Errorf("EventsBackward did not pass fn's error on: %v", err)
		}
		return nil
	})
}

func TestEvents_LastCommit(t *testing.T) {
	db, _ := newJournal(t)
	last := func() []record.Event {
		t.Helper()
		var evs []record.Event
		view(t, db, func(tx journal.Tx) error {
			var err error
			evs, err = tx.LastCommit()
			return err
		})
		return evs
	}
	if evs := last(); len(evs) != 0 {
		t.Fatalf("LastCommit of a new journal = %v", evs)
	}
	first := appendN(t, db, record.EvAdd, "a", "b", "c")
	if got := last(); !reflect.DeepEqual(got, first) {
		t.Errorf("LastCommit = %v, want the three events just appended %v", seqs(got), seqs(first))
	}
	// A transaction that appends nothing leaves LastCommit alone.
	update(t, db, func(tx journal.Tx) error { return tx.PutTask(nil, available("x", 0, 99)) })
	if got := last(); !reflect.DeepEqual(got, first) {
		t.Errorf("after a transaction without events, LastCommit = %v, want %v", seqs(got), seqs(first))
	}
	// A rolled-back transaction leaves it alone too.
	boom := errors.New("boom")
	err := db.Update(func(tx journal.Tx) error {
		if _, err := tx.Append(record.Event{Time: t0, Type: record.EvAdd, Task: "rolled-back"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update: %v", err)
	}
	if got := last(); !reflect.DeepEqual(got, first) {
		t.Errorf("after a rollback, LastCommit = %v, want %v", seqs(got), seqs(first))
	}
	one := appendN(t, db, record.EvClaim, "b")
	if got := last(); !reflect.DeepEqual(got, one) {
		t.Errorf("LastCommit = %v, want only the newest commit's event %v", seqs(got), seqs(one))
	}
	two := appendN(t, db, record.EvAdd, "d", "e")
	if got := last(); !reflect.DeepEqual(got, two) {
		t.Errorf("LastCommit = %v, want %v", seqs(got), seqs(two))
	}
	// Seqs continue across commits: 3 + 1 + 2 events, the rolled-back one not counted.
	view(t, db, func(tx journal.Tx) error {
		if tx.(*boltstore.Tx).NextSeq() != 7 {
			t.Errorf("NextSeq = %d, want 7", tx.(*boltstore.Tx).NextSeq())
		}
		return nil
	})
}

func TestEvents_LastCommitAfterReopen(t *testing.T) {
	dir := newJournalClosed(t)
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, db, record.EvAdd, "a")
	want := appendN(t, db, record.EvAdd, "b", "c")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	view(t, db, func(tx journal.Tx) error {
		got, err := tx.LastCommit()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("LastCommit after reopen = %v, want %v", seqs(got), seqs(want))
		}
		return err
	})
}
