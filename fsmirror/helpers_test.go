package fsmirror_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

// newTree creates a fresh tree in t.TempDir(). At cleanup it checks the
// invariant every operation must keep: nothing is left in .fence/tmp.
func newTree(t *testing.T) *fsmirror.Mirror {
	t.Helper()
	m, err := fsmirror.Create(filepath.Join(t.TempDir(), "tree"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		left, err := m.List(fsmirror.Staging)
		if err != nil {
			t.Errorf("list staging: %v", err)
		}
		if len(left) != 0 {
			t.Errorf("staging not empty after test: %v", left)
		}
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

// put writes a regular task file name with content into dir.
func put(t *testing.T, m *fsmirror.Mirror, dir fsmirror.Dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(m.Path(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// lexists reports whether path exists, without following a symlink.
func lexists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// within runs f and fails the test if it has not returned within a generous
// bound: the calls under test must never block on a FIFO.
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("call blocked (opened a FIFO?)")
	}
}

// moveModes are the two ways a Mirror moves a file: renameat2 with
// RENAME_NOREPLACE, and link then unlink where the file system lacks it
// (NFS). force puts a fresh Mirror in its mode; every move test runs in
// both.
var moveModes = []struct {
	name  string
	force func(m *fsmirror.Mirror)
}{
	{"renameat2", func(*fsmirror.Mirror) {}},
	{"link", forceLinkMoves},
}

// forceLinkMoves makes m answer as NFS does: renameat2 with
// RENAME_NOREPLACE fails with EINVAL, so m moves by link and unlink.
func forceLinkMoves(m *fsmirror.Mirror) {
	m.Fault = func(fsmirror.Dir, string) unix.Errno { return unix.EINVAL }
}

// eachMode runs f on a fresh tree in each of moveModes.
func eachMode(t *testing.T, f func(t *testing.T, m *fsmirror.Mirror)) {
	t.Helper()
	for _, mode := range moveModes {
		t.Run(mode.name, func(t *testing.T) {
			m := newTree(t)
			mode.force(m)
			f(t, m)
		})
	}
}
