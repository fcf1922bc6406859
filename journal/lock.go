package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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
// never ends up holding the journal.
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

	var (
		mu       sync.Mutex
		gaveUp   bool
		acquired = make(chan error, 1)
	)
	go func() {
		err := flockRetry(int(f.Fd()), how)
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			f.Close() // releases the lock if we got it
			return
		}
		acquired <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-acquired:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return &Lock{f: f}, nil
	case <-timer.C:
		mu.Lock()
		defer mu.Unlock()
		select {
		case err := <-acquired: // won the race with the timer after all
			if err == nil {
				return &Lock{f: f}, nil
			}
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		default:
			gaveUp = true
			return nil, &BusyError{Lock: path, Waited: timeout, Holders: lockHolders(path)}
		}
	}
}

// openLockFile opens the lock file: read-write for a writer, read-only for
// a reader, creating it if it is missing.
func openLockFile(path string, exclusive bool) (*os.File, error) {
	if !exclusive {
		f, err := openPlain(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
	return openPlain(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
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

// openPlain opens a file with open(2) and wraps it with os.NewFile. The
// result works like os.OpenFile's for files, but the runtime's network
// poller is left alone: os.OpenFile tries to register every file with it,
// and in a process whose first file this is, that means creating the
// epoll instance first (six system calls for nothing, under the lock for
// bbolt's file).
func openPlain(path string, flag int, perm uint32) (*os.File, error) {
	fd, err := unix.Open(path, flag|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
