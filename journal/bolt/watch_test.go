package bolt_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal/bolt"
)

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
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := bolt.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
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
