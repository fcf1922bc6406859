package bolt_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

// addTask commits one new available task.
func addTask(t *testing.T, db *boltstore.DB, id string) {
	t.Helper()
	update(t, db, func(tx journal.Tx) error {
		if _, err := tx.Append(record.Event{Time: t0, Type: record.EvAdd, Task: id, To: record.Available}); err != nil {
			return err
		}
		return tx.PutTask(nil, available(id, 0, 1))
	})
}

// openParked opens the journal in dir for writing, commits one task and
// parks the handle; Close runs at cleanup.
func openParked(t *testing.T, dir string) *boltstore.DB {
	t.Helper()
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	addTask(t, db, "mine")
	if err := db.Park(); err != nil {
		t.Fatalf("Park: %v", err)
	}
	return db
}

// A parked handle holds no lock: another writer gets in at once.
func TestPark_ReleasesLocks(t *testing.T) {
	dir := newJournalClosed(t)
	openParked(t, dir)
	other, err := boltstore.Open(dir, journal.OpenOptions{Timeout: 0})
	if err != nil {
		t.Fatalf("Open while the other handle is parked: %v", err)
	}
	other.Close()
}

// With nobody else committing, Resume hands the same handle back, and it
// writes as before.
func TestPark_ResumeUnchanged(t *testing.T) {
	dir := newJournalClosed(t)
	db := openParked(t, dir)
	if err := db.Resume(time.Second); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	addTask(t, db, "after-resume")
	// While resumed, the lock is held again.
	if _, err := boltstore.AcquireLock(filepath.Join(dir, boltstore.LockName), true, 0); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("lock while resumed: err = %v; want ErrBusy", err)
	}
	if err := db.Park(); err != nil {
		t.Fatal(err)
	}
	check, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	view(t, check, func(tx journal.Tx) error {
		for _, id := range []string{"mine", "after-resume"} {
			if _, ok, err := tx.Task(id); err != nil || !ok {
				t.Errorf("task %s after park and resume: ok=%v err=%v", id, ok, err)
			}
		}
		for _, e := range tx.Check() {
			t.Errorf("bbolt check: %v", e)
		}
		return nil
	})
}

// A commit by another handle (another process) makes the parked one stale:
// its freelist no longer matches the file. Resume opens it again under the
// lock it took, so the handle sees the other's commits and writes where
// bbolt has room, not over the other's pages.
func TestPark_ResumeAfterOtherCommitReopens(t *testing.T) {
	dir := newJournalClosed(t)
	db := openParked(t, dir)
	other, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Enough commits to reuse the pages the parked handle's freelist
	// still calls free, and to grow the file past its mapping.
	for i := range 200 {
		addTask(t, other, fmt.Sprintf("theirs-%03d-%s", i, strings.Repeat("x", 300)))
	}
	other.Close()
	if err := db.Resume(time.Second); err != nil {
		t.Fatalf("Resume after another commit: %v", err)
	}
	if _, err := boltstore.AcquireLock(filepath.Join(dir, boltstore.LockName), true, 0); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("lock after a stale Resume: err = %v; want ErrBusy (held)", err)
	}
	for i := range 200 {
		addTask(t, db, fmt.Sprintf("mine-%03d-%s", i, strings.Repeat("y", 300)))
	}
	if err := db.Verify(); err != nil {
		t.Fatalf("journal after writing through a resumed stale handle: %v", err)
	}
	view(t, db, func(tx journal.Tx) error {
		for i := range 200 {
			for _, id := range []string{fmt.Sprintf("theirs-%03d-%s", i, strings.Repeat("x", 300)), fmt.Sprintf("mine-%03d-%s", i, strings.Repeat("y", 300))} {
				if _, ok, err := tx.Task(id); err != nil || !ok {
					t.Fatalf("task %.10s… after a stale Resume: ok=%v err=%v", id, ok, err)
				}
			}
		}
		return nil
	})
}

// A journal replaced under the same path (recover does this) is another
// file: a parked writer must not write to the old one, and a parked reader
// must not read it. Resume opens the new one.
func TestPark_ResumeAfterFileReplacedOpensTheNewOne(t *testing.T) {
	eachParked(t, func(t *testing.T, dir string, db *boltstore.DB) {
		fresh := t.TempDir()
		if err := boltstore.Create(fresh, defaults, t0); err != nil {
			t.Fatal(err)
		}
		seed, err := boltstore.Open(fresh, journal.OpenOptions{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		addTask(t, seed, "in-the-new-file")
		seed.Close()
		if err := os.Rename(boltstore.Path(fresh), boltstore.Path(dir)); err != nil {
			t.Fatal(err)
		}
		if err := db.Resume(time.Second); err != nil {
			t.Fatalf("Resume after the file was replaced: %v", err)
		}
		view(t, db, func(tx journal.Tx) error {
			if _, ok, err := tx.Task("in-the-new-file"); err != nil || !ok {
				t.Errorf("resumed handle: task of the new file ok=%v err=%v", ok, err)
			}
			return nil
		})
	})
}

// eachParked runs f on a new journal with a parked writer, then with a
// parked reader.
func eachParked(t *testing.T, f func(t *testing.T, dir string, db *boltstore.DB)) {
	for _, h := range []struct {
		name string
		park func(*testing.T, string) *boltstore.DB
	}{{"writer", openParked}, {"reader", openParkedReader}} {
		t.Run(h.name, func(t *testing.T) {
			dir := newJournalClosed(t)
			f(t, dir, h.park(t, dir))
		})
	}
}

// A Resume whose handle cannot be opened again (the file was replaced by
// a damaged one) fails with what is wrong, and holds no lock.
func TestPark_ResumeOfADamagedFileHoldsNoLock(t *testing.T) {
	eachParked(t, func(t *testing.T, dir string, db *boltstore.DB) {
		if err := os.Remove(boltstore.Path(dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(boltstore.Path(dir), []byte("not a journal"), 0o600); err != nil {
			t.Fatal(err)
		}
		err := db.Resume(time.Second)
		if _, ok := errors.AsType[*journal.CorruptError](err); !ok {
			t.Fatalf("Resume onto a damaged file: err = %v; want a CorruptError", err)
		}
		l, err := boltstore.AcquireLock(filepath.Join(dir, boltstore.LockName), true, 0)
		if err != nil {
			t.Fatalf("lock after a failed Resume: %v; want it free", err)
		}
		l.Release()
		db.Close()
	})
}

// Resume waits for the lock like Open, and gives up busy.
func TestPark_ResumeBusy(t *testing.T) {
	dir := newJournalClosed(t)
	db := openParked(t, dir)
	holder := mustLock(t, filepath.Join(dir, boltstore.LockName), true, time.Second)
	if err := db.Resume(50 * time.Millisecond); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("Resume while another holds the lock: err = %v; want ErrBusy", err)
	}
	holder.Release()
	if err := db.Resume(time.Second); err != nil {
		t.Fatalf("Resume once the lock is free: %v", err)
	}
}

// A parked reader holds no lock, and once resumed it sees what others
// committed meanwhile: bbolt reads the meta pages through the shared
// mapping in every transaction.
func TestPark_ReaderSeesOtherCommits(t *testing.T) {
	dir := newJournalClosed(t)
	ro := openParkedReader(t, dir)
	other, err := boltstore.Open(dir, journal.OpenOptions{Timeout: 0})
	if err != nil {
		t.Fatalf("writer while a reader is parked: %v", err)
	}
	addTask(t, other, "theirs")
	other.Close()
	if err := ro.Resume(time.Second); err != nil {
		t.Fatalf("Resume of a reader after another commit: %v", err)
	}
	if _, err := boltstore.AcquireLock(filepath.Join(dir, boltstore.LockName), true, 0); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("writer's lock while a reader is resumed: err = %v; want ErrBusy", err)
	}
	view(t, ro, func(tx journal.Tx) error {
		if _, ok, err := tx.Task("theirs"); err != nil || !ok {
			t.Errorf("resumed reader: task theirs ok=%v err=%v", ok, err)
		}
		return nil
	})
}

// A journal that grew since the reader mapped it may have pages past the
// mapping: the reader is stale, and resumed it reads every task.
func TestPark_ReaderResumesAfterGrowth(t *testing.T) {
	dir := newJournalClosed(t)
	ro := openParkedReader(t, dir)
	fi, err := os.Stat(boltstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	w, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; ; n++ {
		now, err := os.Stat(boltstore.Path(dir))
		if err != nil {
			t.Fatal(err)
		}
		if now.Size() > 4*fi.Size() {
			break
		}
		addTask(t, w, fmt.Sprintf("t%05d-%s", n, strings.Repeat("x", 200)))
	}
	w.Close()
	if err := ro.Resume(time.Second); err != nil {
		t.Fatalf("Resume of a reader after the file grew from %d bytes: %v", fi.Size(), err)
	}
	view(t, ro, func(tx journal.Tx) error {
		if _, ok, err := tx.Task(fmt.Sprintf("t%05d-%s", n-1, strings.Repeat("x", 200))); err != nil || !ok {
			t.Errorf("last task after growth: ok=%v err=%v", ok, err)
		}
		return nil
	})
}

// openParkedReader opens the journal in dir read-only, reads it once and
// parks the handle; Close runs at cleanup.
func openParkedReader(t *testing.T, dir string) *boltstore.DB {
	t.Helper()
	ro, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	view(t, ro, func(tx journal.Tx) error { return nil })
	if err := ro.Park(); err != nil {
		t.Fatalf("Park of a reader: %v", err)
	}
	return ro
}

// Resume of a handle that was never parked is an error, not a lock taken.
func TestPark_ResumeUnparked(t *testing.T) {
	dir := newJournalClosed(t)
	ro, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Resume(time.Second); err == nil {
		t.Error("Resume of a handle that was never parked succeeded")
	}
}

// WritersHeld follows the lock: a writer and a reader each keep writers
// out (replay lists the tree beside its read only then); parked, neither
// does, and Exclusive is the writer's alone.
func TestPark_WritersHeldFollowsTheLock(t *testing.T) {
	dir := newJournalClosed(t)
	db := openParked(t, dir)
	if db.WritersHeld() || db.Exclusive() {
		t.Errorf("parked writer: WritersHeld %v, Exclusive %v; want false, false", db.WritersHeld(), db.Exclusive())
	}
	if err := db.Resume(time.Second); err != nil {
		t.Fatal(err)
	}
	if !db.WritersHeld() || !db.Exclusive() {
		t.Errorf("writer: WritersHeld %v, Exclusive %v; want true, true", db.WritersHeld(), db.Exclusive())
	}
	if err := db.Park(); err != nil {
		t.Fatal(err)
	}
	ro, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if !ro.WritersHeld() || ro.Exclusive() {
		t.Errorf("reader: WritersHeld %v, Exclusive %v; want true, false", ro.WritersHeld(), ro.Exclusive())
	}
	if _, err := boltstore.AcquireLock(filepath.Join(dir, boltstore.LockName), true, 0); !errors.Is(err, journal.ErrBusy) {
		t.Errorf("a writer's lock while a reader holds WritersHeld: err = %v; want ErrBusy", err)
	}
	if err := ro.Park(); err != nil {
		t.Fatal(err)
	}
	if ro.WritersHeld() {
		t.Error("parked reader: WritersHeld true")
	}
}
