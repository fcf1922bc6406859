package bolt_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
)

// A reader's shared lock is taken on a read-only descriptor, so readers
// need no write access to .fence/lock (flock works on O_RDONLY). Checked
// on the descriptor itself, so it holds whoever runs the test (root
// ignores file modes).
func TestLock_SharedOpensReadOnly(t *testing.T) {
	p := lockPath(t)
	mustLock(t, p, true, time.Second).Release() // the file exists
	l := mustLock(t, p, false, time.Second)
	flags, err := boltstore.LockFlags(l)
	if err != nil {
		t.Fatal(err)
	}
	if flags&unix.O_ACCMODE != unix.O_RDONLY {
		t.Errorf("shared lock opened with access mode %#o, want O_RDONLY", flags&unix.O_ACCMODE)
	}
	w := mustLockAfter(t, l, p)
	if flags, _ := boltstore.LockFlags(w); flags&unix.O_ACCMODE != unix.O_RDWR {
		t.Errorf("exclusive lock opened with access mode %#o, want O_RDWR", flags&unix.O_ACCMODE)
	}
}

func mustLockAfter(t *testing.T, shared *boltstore.Lock, p string) *boltstore.Lock {
	t.Helper()
	shared.Release()
	return mustLock(t, p, true, time.Second)
}

// Readers work on a read-only tree (a backup, a read-only mount in a
// monitoring container), with or without a lock file there. Needs the
// right to mount; the flag test above covers the open mode everywhere.
func TestOpen_ReaderOnReadOnlyMount(t *testing.T) {
	for _, withLock := range []bool{true, false} {
		dir := t.TempDir()
		if err := boltstore.Create(dir, defaults, t0); err != nil {
			t.Fatal(err)
		}
		if withLock {
			mustLock(t, filepath.Join(dir, boltstore.LockName), true, time.Second).Release()
		}
		ro := filepath.Join(t.TempDir(), "ro")
		if err := os.Mkdir(ro, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(dir, ro, "", unix.MS_BIND, ""); err != nil {
			t.Skipf("cannot bind-mount here (%v): TestLock_SharedOpensReadOnly covers the open mode", err)
		}
		t.Cleanup(func() { unix.Unmount(ro, unix.MNT_DETACH) })
		if err := unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			t.Fatalf("remount read-only: %v", err)
		}
		if err := os.WriteFile(filepath.Join(ro, "probe"), nil, 0o644); !errors.Is(err, unix.EROFS) {
			t.Fatalf("the mount is not read-only: %v", err)
		}
		db, err := boltstore.Open(ro, journal.OpenOptions{ReadOnly: true, Timeout: generous})
		if err != nil {
			t.Fatalf("reader Open on a read-only mount (lock file there: %v): %v", withLock, err)
		}
		if err := db.View(func(tx journal.Tx) error { _, err := tx.Defaults(); return err }); err != nil {
			t.Errorf("View on a read-only mount: %v", err)
		}
		db.Close()
		if _, err := boltstore.Open(ro, journal.OpenOptions{Timeout: generous}); err == nil {
			t.Errorf("a writer opened a journal on a read-only mount")
		}
	}
}

// After `rm .fence/lock` while a writer holds it, the next process locks
// a new lock file and must then wait for bbolt's own lock, which the
// writer still holds: that wait is bounded by the caller's timeout and
// ends in ErrBusy (exit 5), not in an "open journal: timeout" error after
// bbolt's fixed second (exit 1).
func TestOpen_LockFileRemovedWhileHeld(t *testing.T) {
	dir := t.TempDir()
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		t.Fatal(err)
	}
	writer, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, boltstore.LockName)); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		const timeout = 1500 * time.Millisecond // longer than bbolt's old fixed second
		start := time.Now()
		db, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: ro, Timeout: timeout})
		if err == nil {
			db.Close()
			t.Fatalf("Open (read-only %v) while the writer holds the journal succeeded", ro)
		}
		if !errors.Is(err, journal.ErrBusy) {
			t.Errorf("Open (read-only %v): %v, want ErrBusy", ro, err)
		}
		// bbolt polls its lock and gives up a poll early: check only that
		// the wait outlasted bbolt's old fixed second.
		if waited := time.Since(start); waited <= time.Second {
			t.Errorf("Open (read-only %v) gave up after %v, well before its %v timeout", ro, waited, timeout)
		}
	}
	// Once the writer lets go, the next one gets in.
	writer.Close()
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: generous})
	if err != nil {
		t.Fatalf("Open after the writer closed: %v", err)
	}
	db.Close()
}
