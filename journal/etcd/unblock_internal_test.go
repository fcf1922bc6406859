package etcd

import (
	"context"
	"slices"
	"testing"

	"github.com/fencectl/fencectl/journal"
)

// TestUnblock_NotesAreReadWithTheSweep: a note is found by a transaction
// that sweeps, in begin's one request (no round trip of its own), is not
// seen while a sweep is recent unless SweepAll, and is gone once dropped.
// A transaction sees its own notes and drops.
func TestUnblock_NotesAreReadWithTheSweep(t *testing.T) {
	cfg, dir := newJournal(t)
	b, s := open(t, cfg, dir)
	if err := s.Update(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		if tx.NotedUnblocking() {
			t.Error("NotedUnblocking before any note")
		}
		if err := tx.NoteUnblocking("root"); err != nil {
			return err
		}
		if !tx.NotedUnblocking() {
			t.Error("NotedUnblocking false after a note")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	notes := func(all, drop bool) (ids []string, requests int) {
		err := s.Update(func(jt journal.Tx) error {
			tx := jt.(*Tx)
			if all {
				tx.SweepAll()
			}
			if err := tx.begin(); err != nil {
				return err
			}
			before := tx.requests
			if err := tx.Unblocking(func(dep string) bool { ids = append(ids, dep); return true }); err != nil {
				return err
			}
			requests = tx.requests - before
			if drop {
				for _, id := range ids {
					if err := tx.DropUnblocking(id); err != nil {
						return err
					}
				}
				var left []string
				_ = tx.Unblocking(func(dep string) bool { left = append(left, dep); return true })
				if len(left) != 0 {
					t.Errorf("after dropping them, this transaction still sees notes %v", left)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids, requests
	}
	if ids, n := notes(false, false); !slices.Equal(ids, []string{"root"}) || n != 0 {
		t.Errorf("no sweep lately: notes %v in %d requests of their own; want [root] from begin's request", ids, n)
	}
	addReady(t, s, 0, 1, "a0")
	claimFirst(t, s) // a commit that sweeps: marks the tree swept
	if ids, _ := notes(false, false); len(ids) != 0 {
		t.Errorf("right after a sweep: notes %v, want none (found by the next sweep)", ids)
	}
	if ids, _ := notes(true, true); !slices.Equal(ids, []string{"root"}) {
		t.Errorf("SweepAll: notes %v, want [root]", ids)
	}
	if _, err := b.cli.Delete(context.Background(), cfg.Prefix+famMeta+metaSweep); err != nil {
		t.Fatal(err)
	}
	if ids, _ := notes(false, false); len(ids) != 0 {
		t.Errorf("after the drop: notes %v, want none", ids)
	}
}
