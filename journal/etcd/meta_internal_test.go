package etcd

import (
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
)

// Every command asks Exists, then opens: one read of the meta keys
// serves both. A later Open reads them afresh.
func TestOpen_TakesTheMetaKeysExistsRead(t *testing.T) {
	cfg, dir := newJournal(t)
	b, _ := open(t, cfg, dir)
	if n := b.metaReads.Load(); n != 1 {
		t.Errorf("Exists and Open read the meta keys %d times, want 1", n)
	}
	if _, err := b.Open(dir, journal.OpenOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if n := b.metaReads.Load(); n != 2 {
		t.Errorf("after a second Open: %d reads of the meta keys, want 2", n)
	}
}

// What Exists kept does not outlive a change of the journal: Open after
// SetAside finds no journal, as it would by reading.
func TestOpen_AfterSetAsideReadsAfresh(t *testing.T) {
	cfg, dir := newJournal(t)
	b, _ := open(t, cfg, dir)
	if ok, err := b.Exists(dir); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	lock, err := b.LockTree(dir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.SetAside(time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Open(journal.OpenOptions{Timeout: 5 * time.Second}); err == nil {
		t.Error("Open after SetAside found a journal: it used the meta keys read before")
	}
	if err := lock.Release(); err != nil {
		t.Fatal(err)
	}
}
