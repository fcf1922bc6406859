package fsmirror_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

func TestMove_MovesFile(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Available, "t1", "payload")
	if err := m.Move("t1", fsmirror.Available, fsmirror.Claimed); err != nil {
		t.Fatal(err)
	}
	if lexists(t, m.Path(fsmirror.Available, "t1")) {
		t.Error("source still exists")
	}
	b, err := os.ReadFile(m.Path(fsmirror.Claimed, "t1"))
	if err != nil || string(b) != "payload" {
		t.Errorf("destination = %q, %v; want payload", b, err)
	}
}

func TestMove_RefusesExistingDestination(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Available, "t1", "new")
	put(t, m, fsmirror.Claimed, "t1", "old")
	err := m.Move("t1", fsmirror.Available, fsmirror.Claimed)
	var ee *fsmirror.ExistsError
	if !errors.As(err, &ee) || !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Move = %v, want ExistsError", err)
	}
	if ee.Path != m.Path(fsmirror.Claimed, "t1") {
		t.Errorf("Path = %q", ee.Path)
	}
	b, _ := os.ReadFile(m.Path(fsmirror.Claimed, "t1"))
	if string(b) != "old" {
		t.Errorf("destination overwritten: %q", b)
	}
	if !lexists(t, m.Path(fsmirror.Available, "t1")) {
		t.Error("source gone after a refused move")
	}
}

func TestMove_RefusesSymlinkSource(t *testing.T) {
	m := newTree(t)
	secret := m.Path(fsmirror.Meta, "secret")
	os.WriteFile(secret, []byte("x"), 0o600)
	if err := os.Symlink(secret, m.Path(fsmirror.Available, "t1")); err != nil {
		t.Fatal(err)
	}
	err := m.Move("t1", fsmirror.Available, fsmirror.Claimed)
	var nr *fsmirror.NotRegularError
	if !errors.As(err, &nr) || nr.Kind != fsmirror.Symlink {
		t.Fatalf("Move = %v, want NotRegularError{Kind: symlink}", err)
	}
	if !strings.Contains(err.Error(), "never followed") {
		t.Errorf("message %q should say symlinks are never followed", err)
	}
	if lexists(t, m.Path(fsmirror.Claimed, "t1")) {
		t.Error("symlink was moved")
	}
}

func TestMove_RefusesFIFOWithoutBlocking(t *testing.T) {
	m := newTree(t)
	if err := unix.Mkfifo(m.Path(fsmirror.Available, "t1"), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	within(t, func() { err = m.Move("t1", fsmirror.Available, fsmirror.Claimed) })
	var nr *fsmirror.NotRegularError
	if !errors.As(err, &nr) || nr.Kind != fsmirror.FIFO {
		t.Fatalf("Move = %v, want NotRegularError{Kind: fifo}", err)
	}
	within(t, func() { _, err = m.OpenTask(fsmirror.Available, "t1") })
	if !errors.As(err, &nr) || nr.Kind != fsmirror.FIFO {
		t.Fatalf("OpenTask = %v, want NotRegularError{Kind: fifo}", err)
	}
}

func TestMove_RefusesDirectorySource(t *testing.T) {
	m := newTree(t)
	os.Mkdir(m.Path(fsmirror.Available, "t1"), 0o755)
	err := m.Move("t1", fsmirror.Available, fsmirror.Claimed)
	var nr *fsmirror.NotRegularError
	if !errors.As(err, &nr) || nr.Kind != fsmirror.Directory {
		t.Fatalf("Move = %v, want NotRegularError{Kind: directory}", err)
	}
}

func TestMove_MissingSourceIsNotExist(t *testing.T) {
	m := newTree(t)
	err := m.Move("t1", fsmirror.Available, fsmirror.Claimed)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Move = %v, want fs.ErrNotExist", err)
	}
}

func TestMove_RefusesInvalidIDAndUnknownDir(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Available, "t1", "")
	var ine *fsmirror.InvalidNameError
	if err := m.Move("../available/t1", fsmirror.Claimed, fsmirror.Done); !errors.As(err, &ine) {
		t.Errorf("Move(../) = %v, want InvalidNameError", err)
	}
	if err := m.Move("t1", fsmirror.Available, fsmirror.Dir("elsewhere")); err == nil {
		t.Error("Move to an unknown dir succeeded")
	}
	if err := m.Move("t1", fsmirror.Available, fsmirror.Available); err == nil {
		t.Error("Move to the same dir succeeded")
	}
	if !lexists(t, m.Path(fsmirror.Available, "t1")) {
		t.Error("refused moves touched the task")
	}
}

func TestMove_CrashHookBetweenRenameAndSync(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Claimed, "t1", "")
	var points []string
	m.Crash = func(point string) {
		points = append(points, point)
		// At this point the rename must be done.
		if !lexists(t, m.Path(fsmirror.Done, "t1")) || lexists(t, m.Path(fsmirror.Claimed, "t1")) {
			t.Error("crash point reached before the rename")
		}
	}
	if err := m.Move("t1", fsmirror.Claimed, fsmirror.Done); err != nil {
		t.Fatal(err)
	}
	if fsmirror.CrashAfterRename != "move:after-rename" {
		t.Errorf("CrashAfterRename = %q", fsmirror.CrashAfterRename)
	}
	if len(points) != 1 || points[0] != fsmirror.CrashAfterRename {
		t.Fatalf("crash points = %q, want [move:after-rename]", points)
	}

	// A refused move never reaches the crash point.
	points = nil
	put(t, m, fsmirror.Claimed, "t1", "")
	m.Move("t1", fsmirror.Claimed, fsmirror.Done)
	if len(points) != 0 {
		t.Errorf("crash point reached by a refused move: %q", points)
	}
}

func TestOpenTask_ReadsRegularRefusesSymlink(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Claimed, "t1", "body")
	f, err := m.OpenTask(fsmirror.Claimed, "t1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(b) != "body" {
		t.Errorf("read %q, %v", b, err)
	}
	os.Symlink(m.Path(fsmirror.Claimed, "t1"), m.Path(fsmirror.Claimed, "t2"))
	var nr *fsmirror.NotRegularError
	if _, err := m.OpenTask(fsmirror.Claimed, "t2"); !errors.As(err, &nr) || nr.Kind != fsmirror.Symlink {
		t.Errorf("OpenTask(symlink) = %v, want NotRegularError", err)
	}
}

func TestExists(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Done, "t1", "")
	os.Symlink("t1", m.Path(fsmirror.Done, "t2"))
	if ok, err := m.Exists(fsmirror.Done, "t1"); !ok || err != nil {
		t.Errorf("Exists(t1) = %v, %v; want true", ok, err)
	}
	if ok, err := m.Exists(fsmirror.Done, "t3"); ok || err != nil {
		t.Errorf("Exists(missing) = %v, %v; want false, nil", ok, err)
	}
	var nr *fsmirror.NotRegularError
	if ok, err := m.Exists(fsmirror.Done, "t2"); ok || !errors.As(err, &nr) {
		t.Errorf("Exists(symlink) = %v, %v; want false, NotRegularError", ok, err)
	}
}

func TestLocate(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Done, "dup", "")
	put(t, m, fsmirror.Claimed, "dup", "")
	put(t, m, fsmirror.Inbox, "new", "")
	os.Symlink("x", m.Path(fsmirror.Available, "link"))

	tests := []struct {
		id    string
		dir   fsmirror.Dir
		count int
	}{
		{"dup", fsmirror.Claimed, 2},
		{"new", fsmirror.Inbox, 1},
	}
	for _, tt := range tests {
		dir, n, err := m.Locate(tt.id)
		if err != nil || dir != tt.dir || n != tt.count {
			t.Errorf("Locate(%s) = %s, %d, %v; want %s, %d", tt.id, dir, n, err, tt.dir, tt.count)
		}
	}
	for _, id := range []string{"missing", "link"} {
		if _, _, err := m.Locate(id); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Locate(%s) = %v, want fs.ErrNotExist", id, err)
		}
	}
}
