package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Park drops the locks but keeps bbolt open: the file mapped, its meta
// and (for a writer) its freelist read. A process that comes back soon
// (the library, one group commit after another; a lease keeper's checks)
// takes the locks back with Resume and skips opening bbolt again: the
// open, the mapping and its page faults, and for a writer the freelist.
//
// A parked handle must not be used until Resume succeeds; Close it when
// done. Only a handle that holds .fence/lock can be parked.
func (db *DB) Park() error {
	if db.lock == nil || db.file == nil {
		return errors.New("journal: only a handle holding .fence/lock can park")
	}
	var head string
	if !db.readOnly {
		var err error
		if head, err = db.Head(); err != nil {
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(db.file.Fd()), &st); err != nil {
		return err
	}
	db.parked = &parkedState{head: head, dev: st.Dev, ino: st.Ino, size: st.Size}
	_ = unix.Flock(int(db.file.Fd()), unix.LOCK_UN)
	err := db.lock.Release()
	db.lock = nil
	return err
}

// parkedState is what Resume compares against: the last commit this handle
// saw (a writer's), and the file it has open, with its size then.
type parkedState struct {
	head     string
	dev, ino uint64
	size     int64
}

// Resume takes the locks of a parked handle back, waiting up to timeout
// like Open; on an error it holds no lock.
//
// A handle that cannot be used as it was parked is opened again in place,
// under the lock just taken: giving the lock up to open afresh would send
// the process through the lock's queue a second time for one commit. A
// writer is stale once anybody else committed: its freelist (in memory)
// no longer says which pages are free. A reader reads the meta pages
// afresh in every transaction (bbolt maps the file shared, so another
// process's commits show through the mapping), so it is stale only when
// the file is another one, or grew: pages past the size it had when
// mapped may lie past the mapping.
func (db *DB) Resume(timeout time.Duration) (err error) {
	p := db.parked
	if p == nil {
		return errors.New("journal: Resume of a handle that is not parked")
	}
	start := time.Now()
	lock, err := AcquireLock(filepath.Join(filepath.Dir(db.path), LockName), !db.readOnly, timeout)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if db.file != nil {
				_ = unix.Flock(int(db.file.Fd()), unix.LOCK_UN)
			}
			lock.Release()
		}
	}()
	stale, err := db.stale(p)
	if err != nil {
		return err
	}
	if stale {
		// bbolt's lock is the old file's until bbolt closes it: reopen
		// waits for the new one's as Open does.
		if err := db.reopen(max(timeout-time.Since(start), time.Millisecond)); err != nil {
			return err
		}
	}
	db.lock, db.parked = lock, nil
	return nil
}

// stale reports whether the parked handle must be opened again (see
// Resume). Unless it must, it takes bbolt's own lock back.
func (db *DB) stale(p *parkedState) (bool, error) {
	// bbolt's own lock: free unless a process outside fencectl holds it,
	// and then reopening is the one to wait for it.
	how := unix.LOCK_EX
	if db.readOnly {
		how = unix.LOCK_SH
	}
	if unix.Flock(int(db.file.Fd()), how|unix.LOCK_NB) != nil {
		return true, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(db.path, &st); err != nil {
		if os.IsNotExist(err) {
			return true, nil // reopen says what is missing
		}
		return false, fmt.Errorf("stat journal %s: %w", db.path, err)
	}
	if st.Dev != p.dev || st.Ino != p.ino || st.Size != p.size {
		return true, nil // recover (or a hand) put another file there, or it grew
	}
	if !db.readOnly {
		if head, err := db.Head(); err != nil || head != p.head {
			return true, nil
		}
	}
	return false, nil
}
