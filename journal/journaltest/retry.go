package journaltest

import (
	"errors"
	"time"

	"github.com/fencectl/fencectl/journal"
)

// Retrying wraps a backend so that every Update runs its function twice:
// once in a transaction that is then rolled back, whatever the function
// returned, and once for real. That is what an optimistic store (etcd)
// does when its compare fails at commit, so a caller whose transaction
// bodies are not re-runnable fails its tests on any backend. Every View
// runs its function twice too, the first outcome dropped, as etcd does
// when compaction takes a reader's snapshot away.
func Retrying(b journal.Backend) journal.Backend { return retryingBackend{b} }

type retryingBackend struct{ journal.Backend }

func (b retryingBackend) Open(dir string, o journal.OpenOptions) (journal.Store, error) {
	s, err := b.Backend.Open(dir, o)
	if err != nil {
		return nil, err
	}
	return RetryingStore(s), nil
}

// RetryingStore is Retrying for one open store.
func RetryingStore(s journal.Store) journal.Store { return retryingStore{s} }

type retryingStore struct{ journal.Store }

// errConflict rolls the first run back, as a failed compare would.
var errConflict = errors.New("journaltest: simulated conflict")

func (s retryingStore) View(fn func(journal.Tx) error) error {
	err := s.Store.View(func(tx journal.Tx) error {
		fn(tx)
		return errConflict
	})
	if !errors.Is(err, errConflict) {
		return err
	}
	return s.Store.View(fn)
}

func (s retryingStore) Update(fn func(journal.Tx) error) error {
	err := s.Store.Update(func(tx journal.Tx) error {
		fn(tx)
		return errConflict
	})
	if !errors.Is(err, errConflict) {
		return err
	}
	return s.Store.Update(fn)
}

// LockTree wraps the stores opened under the lock too, so that recover's
// rebuild is re-run like every other write.
func (b retryingBackend) LockTree(dir string, timeout time.Duration) (journal.TreeLock, error) {
	l, err := b.Backend.LockTree(dir, timeout)
	if err != nil {
		return nil, err
	}
	return retryingLock{l}, nil
}

type retryingLock struct{ journal.TreeLock }

func (l retryingLock) Open(o journal.OpenOptions) (journal.Store, error) {
	s, err := l.TreeLock.Open(o)
	if err != nil {
		return nil, err
	}
	return RetryingStore(s), nil
}
