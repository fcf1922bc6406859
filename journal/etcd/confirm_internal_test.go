package etcd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// TestConfirm_HoldsUntilAReadTaskChanges: Confirm passes while only the
// head moved (another task's commit), and spoils the run once a task it
// read changed: the run is made again on a snapshot that shows the
// change, and what the spoiled run decided is never seen by the caller.
func TestConfirm_HoldsUntilAReadTaskChanges(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	_, other := open(t, cfg, dir)
	putTasks(t, s, 4)

	var answers []error
	var states []record.State
	err := s.Update(func(tx journal.Tx) error {
		rec, _, err := tx.Task("t01")
		if err != nil {
			return err
		}
		states = append(states, rec.State)
		if len(states) == 1 {
			appendFor(t, other, "elsewhere") // only the head moves
			answers = append(answers, tx.Confirm())
			err := other.Update(func(otx journal.Tx) error {
				changed := rec
				changed.State = record.Done
				return otx.PutTask(&rec, changed)
			})
			if err != nil {
				t.Fatal(err)
			}
			answers = append(answers, tx.Confirm())
			return errors.New("a refusal resting on the old snapshot")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v; want the run made again and committed", err)
	}
	if len(answers) != 2 || answers[0] != nil || !errors.Is(answers[1], errConflict) {
		t.Fatalf("Confirm answered %v; want nil after the head alone moved, then the conflict", answers)
	}
	if len(states) != 2 || states[1] != record.Done {
		t.Fatalf("runs saw t01 as %v; want a second run that sees it done", states)
	}
}

// The first Fold marks the journal foldedVersion in the same commit (an
// older fencectl then refuses it instead of rebuilding folded tasks from
// a log without their events); a later V2 write keeps the mark, and the
// journal still opens.
func TestFold_MarksTheJournal(t *testing.T) {
	cfg, dir := newJournal(t)
	b, s := open(t, cfg, dir)
	putTasks(t, s, 2)
	version := func() string {
		t.Helper()
		resp, err := b.cli.Get(context.Background(), b.metaKey(metaVersion))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("read the version: %v", err)
		}
		return string(resp.Kvs[0].Value)
	}
	if v := version(); v == foldedVersion {
		t.Fatalf("a new journal is already %q", v)
	}
	err := s.Update(func(tx journal.Tx) error {
		rec, _, err := tx.Task("t01")
		if err != nil {
			return err
		}
		rec.State = record.Done
		return tx.Fold(rec, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := version(); v != foldedVersion {
		t.Fatalf("after a fold: version %q, want %q", v, foldedVersion)
	}
	err = s.Update(func(tx journal.Tx) error {
		now := time.Now()
		return tx.PutTask(nil, record.Task{ID: "v2", State: record.Available, After: []string{"t00"}, Seq: 9, Created: now, Updated: now})
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := version(); v != foldedVersion {
		t.Fatalf("after a V2 write: version %q, want %q", v, foldedVersion)
	}
	open(t, cfg, dir) // still opens
}
