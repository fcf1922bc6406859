package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
)

// Lock is a held flock on .fence/lock.
type Lock struct {
	f *os.File
}

// AcquireLock takes a blocking flock on path, exclusive or shared, and gives
// up after timeout with ErrBusy. The flock itself blocks in the kernel, so
// the waiter is woken the moment the holder lets go (no polling tail). The
// blocking call runs in a goroutine; if the caller has given up by the time
// it returns, that goroutine drops the lock at once, so an abandoned wait
// never ends up holding the journal, and the next caller in this process
// takes over an abandoned wait instead of starting another (lockWaiter).
//
// A shared lock is taken on a read-only descriptor (flock needs no write
// access), so readers work on a read-only tree: a backup, a read-only
// mount in a monitoring container. Only a missing lock file is created.
func AcquireLock(path string, exclusive bool, timeout time.Duration) (*Lock, error) {
	f, err := openLockFile(path, exclusive)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	// Fast path: free lock, no goroutine.
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err == nil {
		return &Lock{f: f}, nil
	}
	if timeout <= 0 {
		f.Close()
		return nil, &BusyError{Lock: path, Holders: lockHolders(path)}
	}

	key := lockKey{path, how}
	if w := adoptWaiter(key); w != nil {
		f.Close()
		return w.await(timeout)
	}
	w := &lockWaiter{f: f, key: key, waiting: true, result: make(chan error, 1)}
	go w.wait()
	return w.await(timeout)
}

// lockKey names what a waiter waits for: one lock file, in one mode.
type lockKey struct {
	path string
	how  int
}

// A lockWaiter is a goroutine blocked in flock(2) on its own descriptor.
// flock cannot be interrupted, so a caller that gives up leaves its waiter
// blocked until the holder lets go. Such abandoned waiters are kept in
// abandoned and handed to the next caller that wants the same lock, rather
// than each retry opening a descriptor of its own: a keeper that retries
// every second against a stuck holder would otherwise gain a descriptor
// (and a goroutine) per retry for as long as the holder is stuck.
type lockWaiter struct {
	f       *os.File
	key     lockKey
	waiting bool       // someone awaits the result; guarded by waitersMu
	result  chan error // the flock's outcome, sent while waiting
}

var (
	waitersMu sync.Mutex
	abandoned = map[lockKey][]*lockWaiter{}
)

// adoptWaiter takes an abandoned waiter for key, if there is one.
func adoptWaiter(key lockKey) *lockWaiter {
	waitersMu.Lock()
	defer waitersMu.Unlock()
	ws := abandoned[key]
	if len(ws) == 0 {
		return nil
	}
	w := ws[len(ws)-1]
	if len(ws) == 1 {
		delete(abandoned, key)
	} else {
		abandoned[key] = ws[:len(ws)-1]
	}
	w.waiting = true
	return w
}

// wait blocks in flock and hands the outcome to whoever awaits it; with
// nobody waiting it drops the lock at once, so an abandoned wait never
// ends up holding the journal.
func (w *lockWaiter) wait() {
	err := flockRetry(int(w.f.Fd()), w.key.how)
	waitersMu.Lock()
	defer waitersMu.Unlock()
	if w.waiting {
		w.result <- err
		return
	}
	ws := abandoned[w.key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(abandoned, w.key)
	} else {
		abandoned[w.key] = ws
	}
	w.f.Close() // releases the lock if we got it
}

// await waits up to timeout for w's flock; on timeout w is left for the
// next caller (see lockWaiter).
func (w *lockWaiter) await(timeout time.Duration) (*Lock, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-w.result:
	case <-timer.C:
		waitersMu.Lock()
		select {
		case err = <-w.result: // won the race with the timer after all
			waitersMu.Unlock()
		default:
			w.waiting = false
			abandoned[w.key] = append(abandoned[w.key], w)
			waitersMu.Unlock()
			return nil, &BusyError{Lock: w.key.path, Waited: timeout, Holders: lockHolders(w.key.path)}
		}
	}
	if err != nil {
		w.f.Close()
		return nil, fmt.Errorf("lock %s: %w", w.key.path, err)
	}
	return &Lock{f: w.f}, nil
}

// openLockFile opens the lock file: read-write for a writer, read-only for
// a reader, creating it if it is missing.
func openLockFile(path string, exclusive bool) (f *os.File, err error) {
	defer func() {
		if _, ok := errors.AsType[*journal.NotRegularError](err); ok {
			err = fmt.Errorf("%w: move it aside, and the next command makes a new lock file", err)
		}
	}()
	if !exclusive {
		f, err := openPlain(path, os.O_RDONLY, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
	f, err = openPlain(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		giveToOwner(f, filepath.Dir(path))
	}
	return f, err
}

// giveToOwner gives a lock file root made in another user's .fence to
// that user: a reader (root's `status` on a user's tree) that made it as
// root's 0600 locked the owner out of every write (found from outside).
func giveToOwner(f *os.File, dir string) {
	if os.Geteuid() != 0 {
		return
	}
	var fst, dst unix.Stat_t
	if unix.Fstat(int(f.Fd()), &fst) != nil || unix.Lstat(dir, &dst) != nil {
		return
	}
	if fst.Uid == 0 && dst.Uid != 0 {
		_ = f.Chown(int(dst.Uid), int(dst.Gid))
	}
}

func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// Release drops the lock. Safe to call on nil and twice.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// openPlain opens a file of the journal's (its lock, its file) through
// journal.OpenRegular: never a FIFO planted in its place, which would
// keep a reader's open waiting past any timeout, and never registered
// with the runtime's network poller.
func openPlain(path string, flag int, perm uint32) (*os.File, error) {
	return journal.OpenRegular(path, flag, perm)
}
