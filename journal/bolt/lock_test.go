package bolt_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
)

// generous bounds a wait that must end long before it: the tests assert
// that something happens, never how fast.
const generous = 10 * time.Second

func lockPath(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), boltstore.LockName)
}

func mustLock(t *testing.T, path string, exclusive bool, timeout time.Duration) *boltstore.Lock {
	t.Helper()
	l, err := boltstore.AcquireLock(path, exclusive, timeout)
	if err != nil {
		t.Fatalf("AcquireLock(exclusive=%v): %v", exclusive, err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

func TestLock_ExclusiveBlocksExclusive(t *testing.T) {
	p := lockPath(t)
	mustLock(t, p, true, time.Second)
	start := time.Now()
	l, err := boltstore.AcquireLock(p, true, 100*time.Millisecond)
	if !errors.Is(err, journal.ErrBusy) {
		l.Release()
		t.Fatalf("second exclusive lock: err = %v, want ErrBusy", err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("gave up after %v, before the 100ms timeout", waited)
	}
	if l != nil {
		t.Errorf("ErrBusy came with a lock")
	}
}

func TestLock_ZeroTimeoutFailsAtOnce(t *testing.T) {
	p := lockPath(t)
	mustLock(t, p, true, time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := boltstore.AcquireLock(p, true, 0)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, journal.ErrBusy) {
			t.Fatalf("err = %v, want ErrBusy", err)
		}
	case <-time.After(generous):
		t.Fatal("AcquireLock with timeout 0 blocked")
	}
}

func TestLock_SharedCoexist(t *testing.T) {
	p := lockPath(t)
	mustLock(t, p, false, time.Second)
	mustLock(t, p, false, 0) // no wait at all: a second reader is never blocked
	mustLock(t, p, false, 0)
}

func TestLock_SharedBlocksExclusive(t *testing.T) {
	p := lockPath(t)
	mustLock(t, p, false, time.Second)
	if _, err := boltstore.AcquireLock(p, true, 50*time.Millisecond); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("exclusive lock while a shared one is held: err = %v, want ErrBusy", err)
	}
}

func TestLock_ExclusiveBlocksShared(t *testing.T) {
	p := lockPath(t)
	mustLock(t, p, true, time.Second)
	if _, err := boltstore.AcquireLock(p, false, 50*time.Millisecond); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("shared lock while an exclusive one is held: err = %v, want ErrBusy", err)
	}
}

func TestLock_WaiterAcquiresOnRelease(t *testing.T) {
	for _, exclusive := range []bool{true, false} {
		t.Run(fmt.Sprintf("waiter-exclusive=%v", exclusive), func(t *testing.T) {
			p := lockPath(t)
			holder, err := boltstore.AcquireLock(p, true, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			got := make(chan error, 1)
			var waiter *boltstore.Lock
			go func() {
				close(started)
				l, err := boltstore.AcquireLock(p, exclusive, generous)
				waiter = l
				got <- err
			}()
			<-started
			// The waiter cannot have the lock while the holder keeps it.
			select {
			case err := <-got:
				t.Fatalf("waiter returned while the lock was held: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			released := time.Now()
			if err := holder.Release(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
				if waited := time.Since(released); waited > generous/2 {
					t.Errorf("waiter took %v after the release", waited)
				}
				defer waiter.Release()
				// And it really holds it now.
				if _, err := boltstore.AcquireLock(p, true, 0); !errors.Is(err, journal.ErrBusy) {
					t.Errorf("lock free although the waiter got it: err = %v", err)
				}
			case <-time.After(generous):
				t.Fatal("waiter still blocked after the holder released")
			}
		})
	}
}

func TestLock_AbandonedWaiterDoesNotKeepLock(t *testing.T) {
	p := lockPath(t)
	holder, err := boltstore.AcquireLock(p, true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Several waiters give up while the holder keeps the lock.
	for i := 0; i < 3; i++ {
		if _, err := boltstore.AcquireLock(p, i%2 == 0, 20*time.Millisecond); !errors.Is(err, journal.ErrBusy) {
			t.Fatalf("waiter %d: err = %v, want ErrBusy", i, err)
		}
	}
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	// A third party gets the lock: the abandoned waits may grab it in
	// passing, but must let go at once.
	l, err := boltstore.AcquireLock(p, true, generous)
	if err != nil {
		t.Fatalf("third party after the holder released: %v", err)
	}
	defer l.Release()
	// And keeps it: no abandoned waiter still competes for it afterwards.
	if _, err := boltstore.AcquireLock(p, true, 50*time.Millisecond); !errors.Is(err, journal.ErrBusy) {
		t.Errorf("lock not held by the third party: err = %v", err)
	}
}

// A caller that retries against a stuck holder (the lease keeper does, every
// second) must not gain a descriptor per retry: flock cannot be interrupted,
// so each abandoned wait stays blocked until the holder lets go.
func TestLock_RetriesAgainstStuckHolderKeepDescriptorsFlat(t *testing.T) {
	p := lockPath(t)
	holder := mustLock(t, p, true, time.Second)
	busy := func() {
		t.Helper()
		if _, err := boltstore.AcquireLock(p, true, time.Millisecond); !errors.Is(err, journal.ErrBusy) {
			t.Fatalf("err = %v, want ErrBusy", err)
		}
	}
	busy()
	before := openDescriptors(t)
	for i := 0; i < 50; i++ {
		busy()
	}
	if after := openDescriptors(t); after > before+1 {
		t.Errorf("descriptors grew from %d to %d over 50 abandoned waits", before, after)
	}
	// The adopted wait still works: it gets the lock once the holder goes.
	if err := holder.Release(); err != nil {
		t.Fatal(err)
	}
	l, err := boltstore.AcquireLock(p, true, generous)
	if err != nil {
		t.Fatalf("after the holder released: %v", err)
	}
	l.Release()
}

func openDescriptors(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestLock_ReleaseTwiceAndNil(t *testing.T) {
	p := lockPath(t)
	l, err := boltstore.AcquireLock(p, true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("first Release: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	var none *boltstore.Lock
	if err := none.Release(); err != nil {
		t.Errorf("Release on nil: %v", err)
	}
	// Released means free.
	l2, err := boltstore.AcquireLock(p, true, 0)
	if err != nil {
		t.Fatalf("lock not free after Release: %v", err)
	}
	l2.Release()
}

func TestLock_RefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, boltstore.LockName)
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	l, err := boltstore.AcquireLock(p, true, time.Second)
	if err == nil {
		l.Release()
		t.Fatal("AcquireLock followed a symlink")
	}
	if errors.Is(err, journal.ErrBusy) {
		t.Errorf("a symlinked lock file reported as busy: %v", err)
	}
}

func TestLock_FileNotWorldReadable(t *testing.T) {
	p := lockPath(t)
	mustLock(t, p, true, time.Second)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		t.Errorf("lock file mode %v is world-accessible", fi.Mode().Perm())
	}
}

// lockHelperEnv makes the test binary, re-executed, hold the lock named by
// its value until stdin closes: a second process for the cross-process test.
const lockHelperEnv = "JOURNAL_TEST_HOLD_LOCK"

func TestMain(m *testing.M) {
	if p := os.Getenv(lockHelperEnv); p != "" {
		os.Exit(holdLock(p))
	}
	os.Exit(m.Run())
}

func holdLock(p string) int {
	l, err := boltstore.AcquireLock(p, os.Getenv(lockHelperEnv+"_SHARED") == "", generous)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("locked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	l.Release()
	return 0
}

// startHolder runs a child process that takes the lock at p and holds it
// until the returned function is called (which waits for it to exit).
func startHolder(t *testing.T, p string, shared bool) (stop func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+p)
	if shared {
		cmd.Env = append(cmd.Env, lockHelperEnv+"_SHARED=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("child did not take the lock: %q, %v", line, err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestLock_CrossProcess(t *testing.T) {
	p := lockPath(t)
	stop := startHolder(t, p, false)
	if _, err := boltstore.AcquireLock(p, true, 100*time.Millisecond); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("exclusive lock while another process holds it: err = %v, want ErrBusy", err)
	}
	if _, err := boltstore.AcquireLock(p, false, 50*time.Millisecond); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("shared lock while another process holds it exclusively: err = %v, want ErrBusy", err)
	}
	// A waiter started now gets the lock once the other process lets go.
	got := make(chan error, 1)
	go func() {
		l, err := boltstore.AcquireLock(p, true, generous)
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	stop()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter after the other process exited: %v", err)
		}
	case <-time.After(generous + time.Second):
		t.Fatal("waiter still blocked")
	}
}

func TestLock_CrossProcessShared(t *testing.T) {
	p := lockPath(t)
	startHolder(t, p, true)
	l, err := boltstore.AcquireLock(p, false, 0)
	if err != nil {
		t.Fatalf("shared lock while another process holds it shared: %v", err)
	}
	l.Release()
	if _, err := boltstore.AcquireLock(p, true, 50*time.Millisecond); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("exclusive lock while another process holds it shared: err = %v, want ErrBusy", err)
	}
}
