package journaltest

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// testFold: Fold keeps a task's record as its base, Folded and FoldedTask
// read it back; DropEvents drops only that task's events up to the seq
// given, oldest first, a limit at a time, and returns them, counting
// them by kind (Dropped); DeleteClaim forgets a claim but keeps its task
// (FoldedToken); Reset keeps the folded records, the tokens' tasks and the
// count; and the seq of the next Append stays above every seq ever
// appended.
func testFold(t *testing.T, s journal.Store) {
	var seqs []uint64
	update(t, s, func(tx journal.Tx) error {
		seqs = seqs[:0]
		for i, id := range []string{"a", "b", "a", "a", "b", "a"} {
			ev, err := tx.Append(record.Event{Time: T0.Add(time.Duration(i) * time.Second), Type: record.EvHeartbeat, Task: id, Token: uint64(10 + i)})
			if err != nil {
				return err
			}
			seqs = append(seqs, ev.Seq)
		}
		return tx.PutClaim(record.Claim{Token: 10, Task: "a", At: T0})
	})
	done := available("a", 0, seqs[0])
	done.State = record.Done
	put(t, s, done)
	update(t, s, func(tx journal.Tx) error { return tx.Fold(done, seqs[3]) })
	view(t, s, func(tx journal.Tx) error {
		rec, upTo, ok, err := tx.FoldedTask("a")
		if err != nil || !ok || upTo != seqs[3] || rec.State != record.Done {
			t.Errorf("FoldedTask(a) = %v, %d, %v, %v; want the done record up to seq %d", rec, upTo, ok, err, seqs[3])
		}
		if _, _, ok, err := tx.FoldedTask("b"); ok || err != nil {
			t.Errorf("FoldedTask(b) = %v, %v; want none", ok, err)
		}
		n := 0
		err = tx.Folded(func(f journal.FoldedRecord) (bool, error) {
			n++
			rec, err := f.Task()
			if f.ID != "a" || rec.ID != "a" || f.UpTo != seqs[3] || err != nil || rec.State != record.Done {
				t.Errorf("Folded gave %s (%s, %s, %v) up to %d", f.ID, rec.ID, rec.State, err, f.UpTo)
			}
			return true, nil
		})
		if err != nil || n != 1 {
			t.Errorf("Folded: %d records, %v; want 1", n, err)
		}
		return nil
	})
	// A limit at a time, oldest first: a's events at seqs 0, 2, 3.
	var got []uint64
	for range 3 {
		var once []uint64
		update(t, s, func(tx journal.Tx) error {
			once = once[:0] // a store may run this more than once
			evs, err := tx.DropEvents("a", seqs[3], 2)
			for _, ev := range evs {
				if ev.Task != "a" {
					t.Errorf("DropEvents(a) dropped an event of %s", ev.Task)
				}
				once = append(once, ev.Seq)
			}
			return err
		})
		got = append(got, once...)
	}
	if want := []uint64{seqs[0], seqs[2], seqs[3]}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("DropEvents dropped seqs %v, want %v", got, want)
	}
	heartbeat := journal.EventKind{Type: record.EvHeartbeat}
	dropped := func(want uint64) {
		t.Helper()
		view(t, s, func(tx journal.Tx) error {
			got, err := tx.Dropped()
			if err != nil || len(got) != 1 || got[heartbeat] != want {
				t.Errorf("Dropped() = %v, %v; want %d heartbeats", got, err, want)
			}
			return nil
		})
	}
	dropped(3)
	update(t, s, func(tx journal.Tx) error { return tx.DeleteClaim(10, "a") })
	update(t, s, func(tx journal.Tx) error { return tx.Reset() })
	dropped(3)
	var left []uint64
	var last uint64
	view(t, s, func(tx journal.Tx) error {
		left = left[:0]
		err := tx.Events(1, func(ev record.Event) (bool, error) {
			left = append(left, ev.Seq)
			return true, nil
		})
		if _, known, err := tx.Claim(10); known || err != nil {
			t.Errorf("Claim(10) after DeleteClaim: %v, %v", known, err)
		}
		if task, ok, err := tx.FoldedToken(10); task != "a" || !ok || err != nil {
			t.Errorf("FoldedToken(10) after DeleteClaim and Reset = %q, %v, %v; want a", task, ok, err)
		}
		if task, ok, err := tx.FoldedToken(11); ok || err != nil {
			t.Errorf("FoldedToken(11) = %q, %v, %v; want none", task, ok, err)
		}
		if _, _, ok, err := tx.FoldedTask("a"); !ok || err != nil {
			t.Errorf("Reset dropped the folded record: %v, %v", ok, err)
		}
		if err := tx.TaskEventsBackward("a", func(ev record.Event) (bool, error) {
			if ev.Seq != seqs[5] {
				t.Errorf("task a still has folded event %d", ev.Seq)
			}
			return true, nil
		}); err != nil {
			return err
		}
		return err
	})
	if want := []uint64{seqs[1], seqs[4], seqs[5]}; fmt.Sprint(left) != fmt.Sprint(want) {
		t.Errorf("events left %v, want b's and a's after the fold %v", left, want)
	}
	// Drop the newest events too: the next seq is still a new one.
	update(t, s, func(tx journal.Tx) error {
		if _, err := tx.DropEvents("b", seqs[4], 0); err != nil {
			return err
		}
		_, err := tx.DropEvents("a", seqs[5], 0)
		return err
	})
	dropped(6)
	update(t, s, func(tx journal.Tx) error {
		ev, err := tx.Append(record.Event{Time: T0, Type: record.EvAdd, Task: "c", To: record.Available})
		last = ev.Seq
		return err
	})
	if last <= seqs[5] {
		t.Errorf("Append after dropping events up to seq %d gave seq %d: reused", seqs[5], last)
	}
}
