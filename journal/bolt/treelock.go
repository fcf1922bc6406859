package bolt

import (
	"path/filepath"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// LockTree takes the flock on dir/lock exclusively: every Open (which
// takes it first) waits until Release.
func (Backend) LockTree(dir string, timeout time.Duration) (journal.TreeLock, error) {
	l, err := AcquireLock(filepath.Join(dir, LockName), true, timeout)
	if err != nil {
		return nil, err
	}
	return &treeLock{dir: dir, lock: l}, nil
}

// treeLock is the held flock on dir/lock, through which init and recover
// make and rebuild the journal file.
type treeLock struct {
	dir  string
	lock *Lock
}

// Open takes bbolt's own lock alone: the flock is held already, by us.
func (t *treeLock) Open(o journal.OpenOptions) (journal.Store, error) {
	db, err := open(t.dir, o, LockBoltOnly)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return db, nil
}

// Create sweeps what a killed create left, safe now that every creator
// waits for our flock, and builds the journal file under a name of its own.
func (t *treeLock) Create(d record.Defaults, seed uint64) error {
	sweepCreating(t.dir)
	return createSeeded(t.dir, d, seed)
}

func (t *treeLock) SetAside(now time.Time) (string, error) { return setAside(t.dir, now) }

func (t *treeLock) Salvage() journal.Salvaged {
	var s journal.Salvaged
	s.Token, s.TokenOK = salvageTokens(t.dir)
	s.Defaults, s.DefaultsOK = readDefaults(Path(t.dir))
	return s
}

func (t *treeLock) Release() error { return t.lock.Release() }
