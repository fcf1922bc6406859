package etcd_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	etcdstore "github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
	"github.com/fencectl/fencectl/journal/record"
)

// TestContention_EveryWriterGetsThrough: 16 clients, each with its own
// connection, append to one journal at once; every append commits (none
// starves until its timeout), the log is dense and holds each once.
func TestContention_EveryWriterGetsThrough(t *testing.T) {
	const clients, each = 16, 15
	endpoints := etcdtest.Start(t, 1).Endpoints()
	cfg := journal.Config{Backend: "etcd", Endpoints: endpoints, Prefix: "/contention"}
	dir := filepath.Join(t.TempDir(), ".fence")
	first, err := etcdstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	lock, err := first.LockTree(dir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Create(record.Defaults{TTL: time.Minute, MaxAttempts: 3}, 1); err != nil {
		t.Fatal(err)
	}
	lock.Release()

	before := etcdstore.Retries.Load()
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := etcdstore.New(cfg)
			if err != nil {
				errs <- err
				return
			}
			defer b.Close()
			s, err := b.Open(dir, journal.OpenOptions{Timeout: 30 * time.Second})
			if err != nil {
				errs <- err
				return
			}
			for i := range each {
				id := fmt.Sprintf("c%02d-%02d", c, i)
				errs <- s.Update(func(tx journal.Tx) error {
					_, err := tx.Append(record.Event{Type: record.EvAdd, Task: id, To: record.Available})
					return err
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a writer did not get through: %v", err)
		}
	}
	s, err := first.Open(dir, journal.OpenOptions{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var seq uint64
	err = s.View(func(tx journal.Tx) error {
		return tx.Events(1, func(ev record.Event) (bool, error) {
			if ev.Seq != seq+1 || seen[ev.Task] {
				return false, fmt.Errorf("event %d (%s) after %d: the log must be dense, each append once", ev.Seq, ev.Task, seq)
			}
			seq, seen[ev.Task] = ev.Seq, true
			return true, nil
		})
	})
	if err != nil || len(seen) != clients*each {
		t.Fatalf("log holds %d appends, want %d: %v", len(seen), clients*each, err)
	}
	t.Logf("%d appends by %d clients: %.2f retries per append", clients*each, clients, float64(etcdstore.Retries.Load()-before)/float64(clients*each))
}
