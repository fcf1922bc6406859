package etcd

import (
	"fmt"
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
	cfg := journal.Config{Backend: "etcd", Endpoints: etcdtest.Start(t, 1).Endpoints(), Prefix: "/internal"}
	return cfg, createJournal(t, cfg)
}

// createJournal makes an empty journal as cfg says and returns its meta
// directory.
func createJournal(t *testing.T, cfg journal.Config) string {
	t.Helper()
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
	return dir
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

// putAvailable stores n available tasks t00, t01, ... in one transaction.
func putAvailable(t *testing.T, s journal.Store, n int, now time.Time) {
	t.Helper()
	err := s.Update(func(tx journal.Tx) error {
		for i := range n {
			rec := record.Task{ID: fmt.Sprintf("t%02d", i), State: record.Available, MaxAttempts: 3, Seq: uint64(i + 1), Created: now, Updated: now}
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
