package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
)

// Park drops the locks but keeps bbolt open: the file mapped, its meta and
// freelist read. A process that writes again soon (the library, one group
// commit after another) takes the locks back with Resume and, if nobody
// else committed meanwhile, skips opening bbolt again (reading its meta
// pages and mapping the file) for every group, work done under the lock.
//
// A parked handle must not be used until Resume succeeds; Close it when
// done. Only a writer handle opened with the blocking flock can be parked.
func (db *DB) Park() error {
	if db.lock == nil || db.readOnly || db.file == nil {
		return errors.New("journal: only a writer holding .fence/lock can park")
	}
	head, err := db.Head()
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(db.file.Fd()), &st); err != nil {
		return err
	}
	db.parked = &parkedState{head: head, dev: st.Dev, ino: st.Ino}
	_ = unix.Flock(int(db.file.Fd()), unix.LOCK_UN)
	err = db.lock.Release()
	db.lock = nil
	return err
}

// parkedState is what Resume compares against: the last commit this handle
// saw and the file it has open.
type parkedState struct {
	head     string
	dev, ino uint64
}

// Resume takes the locks of a parked handle back, waiting up to timeout
// like Open. It returns ErrStale, with no lock held, if the journal moved
// on meanwhile; any other error also leaves no lock held.
func (db *DB) Resume(timeout time.Duration) (err error) {
	p := db.parked
	if p == nil {
		return errors.New("journal: Resume of a handle that is not parked")
	}
	lock, err := AcquireLock(filepath.Join(filepath.Dir(db.path), LockName), true, timeout)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = unix.Flock(int(db.file.Fd()), unix.LOCK_UN)
			lock.Release()
		}
	}()
	// bbolt's own lock: free unless a process outside fencectl holds it,
	// and then a fresh Open is the one to wait for it.
	if unix.Flock(int(db.file.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return journal.ErrStale
	}
	var st unix.Stat_t
	if err := unix.Stat(db.path, &st); err != nil {
		if os.IsNotExist(err) {
			return journal.ErrStale
		}
		return fmt.Errorf("stat journal %s: %w", db.path, err)
	}
	if st.Dev != p.dev || st.Ino != p.ino {
		return journal.ErrStale // recover (or a hand) put another file there
	}
	if head, err := db.Head(); err != nil || head != p.head {
		return journal.ErrStale
	}
	db.lock, db.parked = lock, nil
	return nil
}
