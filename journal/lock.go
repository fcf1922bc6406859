package journal

import (
	"fmt"
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
func AcquireLock(path string, exclusive bool, timeout time.Duration) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
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
