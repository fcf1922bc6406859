package bolt_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal/bolt"
)

// watchedJournal makes an empty journal file in dir's .fence (which must
// exist), watches it, and opens it for writing.
func watchedJournal(t *testing.T, dir string) (*bolt.Watcher, *os.File) {
	t.Helper()
	path := bolt.Path(dir)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := bolt.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	return w, f
}

// TestWatch_JournalWrites: a write to the journal file signals C; a
// symbolic link in the journal's place is refused, not followed; Close is
// safe twice.
func TestWatch_JournalWrites(t *testing.T) {
	dir := t.TempDir()
	path := bolt.Path(dir)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "journal.db")
	if err := os.WriteFile(elsewhere, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, path); err != nil {
		t.Fatal(err)
	}
	if w, err := bolt.Watch(dir); err == nil {
		w.Close()
		t.Fatal("Watch followed a symbolic link in the journal's place")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w, f := watchedJournal(t, dir)
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	select {
	case <-w.C():
	case <-time.After(20 * time.Second):
		t.Fatal("no signal after a write to the journal")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestWatch_CoalescesAStorm: writes that come faster than CoalesceWindow
// wake the reader at most once a window (not once a write), and the last
// write of the storm is still followed by a signal.
func TestWatch_CoalescesAStorm(t *testing.T) {
	dir := t.TempDir()
	path := bolt.Path(dir)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	w, f := watchedJournal(t, dir)
	defer w.Close()
	defer f.Close()

	stop := make(chan struct{})
	counted := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-w.C():
				n++
			case <-stop:
				counted <- n
				return
			}
		}
	}()
	// Spaced a little (a busy wait: a sleep this short takes a
	// millisecond on some machines), so that a reader that kept up would
	// see each one.
	const writes = 100
	start := time.Now()
	for i := range writes {
		if _, err := f.WriteAt([]byte("x"), int64(i)); err != nil {
			t.Fatal(err)
		}
		for at := time.Now(); time.Since(at) < 200*time.Microsecond; {
		}
	}
	time.Sleep(10 * time.Millisecond)
	close(stop)
	n := <-counted
	elapsed := time.Since(start)
	if most := int(elapsed/bolt.CoalesceWindow) + 2; n > most {
		t.Fatalf("%d writes in %s woke the reader %d times; want at most %d (one per %s)", writes, elapsed, n, most, bolt.CoalesceWindow)
	}
	if n == 0 {
		t.Fatal("a storm of writes gave no signal at all")
	}

	// The storm is over: the next write after a quiet spell is signalled.
	for len(w.C()) > 0 {
		<-w.C()
	}
	if _, err := f.WriteAt([]byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-time.After(20 * time.Second):
		t.Fatal("no signal for a write after the storm")
	}
}
