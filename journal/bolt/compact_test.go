package bolt_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

// TestReclaim_ShrinksAndSwaps: after events are dropped, Reclaim gives the
// pages back (the file shrinks), keeps the next seq above every one
// appended, leaves the file 0600 and no copy behind; the handle goes on
// writing to the new file; a parked handle of the old file resumes on the
// new one; a watcher hears the swap and then the new file's writes.
func TestReclaim_ShrinksAndSwaps(t *testing.T) {
	dir := newJournalClosed(t)
	parked := openParked(t, dir)
	w, err := boltstore.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 3000
	var last uint64
	for i := 0; i < n; i += 500 {
		update(t, db, func(tx journal.Tx) error {
			for j := i; j < i+500; j++ {
				ev, err := tx.Append(record.Event{Time: t0, Type: record.EvAdd, Task: fmt.Sprintf("t%05d", j), To: record.Available, Reason: string(make([]byte, 200))})
				if err != nil {
					return err
				}
				last = ev.Seq
			}
			return nil
		})
	}
	update(t, db, func(tx journal.Tx) error {
		for j := 0; j < n; j++ {
			if _, err := tx.DropEvents(fmt.Sprintf("t%05d", j), last, 0); err != nil {
				return err
			}
		}
		return nil
	})
	drain(w)
	res, err := db.Reclaim(journal.ReclaimOptions{})
	if err != nil {
		t.Fatalf("Reclaim: %v", err)
	}
	if res.After >= res.Before/4 {
		t.Errorf("Reclaim: %d bytes before, %d after; want the dropped events' pages back", res.Before, res.After)
	}
	fi, err := os.Stat(boltstore.Path(dir))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != res.After {
		t.Errorf("journal after Reclaim: %v, %v; want mode 0600, %d bytes", fi, err, res.After)
	}
	if left, _ := filepath.Glob(boltstore.Path(dir) + ".compacting-*"); len(left) > 0 {
		t.Errorf("Reclaim left %v", left)
	}
	waitSignal(t, w, "the swap")
	update(t, db, func(tx journal.Tx) error {
		ev, err := tx.Append(record.Event{Time: t0, Type: record.EvAdd, Task: "after", To: record.Available})
		if err == nil && ev.Seq <= last {
			err = fmt.Errorf("seq %d after Reclaim, want above %d", ev.Seq, last)
		}
		return err
	})
	waitSignal(t, w, "a write to the new file")
	db.Close()
	if err := parked.Resume(time.Second); err != nil {
		t.Fatalf("Resume of a handle parked on the old file: %v", err)
	}
	view(t, parked, func(tx journal.Tx) error {
		found := false
		err := tx.Events(last+1, func(ev record.Event) (bool, error) {
			found = found || ev.Task == "after"
			return true, nil
		})
		if err != nil || !found {
			t.Errorf("handle parked on the old file, resumed: the event written after Reclaim found=%v err=%v", found, err)
		}
		return nil
	})
}

func drain(w *boltstore.Watcher) {
	for {
		select {
		case <-w.C():
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
}

func waitSignal(t *testing.T, w *boltstore.Watcher, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(20 * time.Second):
		t.Fatalf("no watch signal after %s", what)
	}
}
