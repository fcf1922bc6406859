package bolt_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

// t0 is the fixed "now" most tests pass to the journal: the rules take the
// time as an argument, so no test needs the real clock.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var defaults = record.Defaults{TTL: 10 * time.Minute, MaxAttempts: 3}

// newJournal creates a journal in a fresh t.TempDir() and opens it for
// writing. At cleanup it runs bbolt's consistency check and closes it.
func newJournal(t *testing.T) (*boltstore.DB, string) {
	t.Helper()
	dir := t.TempDir()
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		err := db.View(func(tx journal.Tx) error {
			for _, e := range tx.Check() {
				t.Errorf("bbolt check: %v", e)
			}
			return nil
		})
		if err != nil {
			t.Errorf("View for check: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db, dir
}

// update runs fn in one write transaction and fails the test on error.
func update(t *testing.T, db *boltstore.DB, fn func(tx journal.Tx) error) {
	t.Helper()
	if err := db.Update(fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// view runs fn in one read transaction and fails the test on error.
func view(t *testing.T, db *boltstore.DB, fn func(tx journal.Tx) error) {
	t.Helper()
	if err := db.View(fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

// available is a record of an available task.
func available(id string, priority int64, seq uint64) record.Task {
	return record.Task{ID: id, State: record.Available, Priority: priority, MaxAttempts: 3, Seq: seq, Created: t0, Updated: t0}
}

// claimed is rec under a lease with token and deadline.
func claimed(rec record.Task, token uint64, deadline time.Time) record.Task {
	rec.State = record.Claimed
	rec.Lease = &record.Lease{Token: token, Agent: "agent-" + rec.ID, ClaimedAt: t0, Deadline: deadline}
	return rec
}

// noPanic runs f and turns a panic into a test failure naming what, so a
// damaged file that crashes the reader fails one test, not the binary.
func noPanic(t *testing.T, what string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// asCorrupt reports whether err is a *journal.CorruptError naming path.
func asCorrupt(t *testing.T, err error, path string) {
	t.Helper()
	var ce *journal.CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T), want *journal.CorruptError", err, err)
	}
	if ce.Path != path {
		t.Errorf("CorruptError.Path = %q, want %q", ce.Path, path)
	}
	if ce.Detail == "" {
		t.Errorf("CorruptError.Detail is empty")
	}
}
