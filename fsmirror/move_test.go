package fsmirror_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

func TestMove_MovesFile(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
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
	})
}

func TestMove_RefusesExistingDestination(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
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
	})
}

func TestMove_RefusesSymlinkSource(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
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
	})
}

func TestMove_RefusesFIFOWithoutBlocking(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
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
	})
}

func TestMove_RefusesDirectorySource(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
		os.Mkdir(m.Path(fsmirror.Available, "t1"), 0o755)
		err := m.Move("t1", fsmirror.Available, fsmirror.Claimed)
		var nr *fsmirror.NotRegularError
		if !errors.As(err, &nr) || nr.Kind != fsmirror.Directory {
			t.Fatalf("Move = %v, want NotRegularError{Kind: directory}", err)
		}
	})
}

func TestMove_MissingSourceIsNotExist(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
		err := m.Move("t1", fsmirror.Available, fsmirror.Claimed)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Move = %v, want fs.ErrNotExist", err)
		}
	})
}

func TestMove_RefusesInvalidIDAndUnknownDir(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
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
	})
}

func TestMove_CrashHookBetweenRenameAndSync(t *testing.T) {
	if fsmirror.CrashAfterRename != "move:after-rename" || fsmirror.CrashAfterLink != "move:after-link" {
		t.Errorf("crash points = %q, %q", fsmirror.CrashAfterRename, fsmirror.CrashAfterLink)
	}
	want := map[string][]string{
		"renameat2": {fsmirror.CrashAfterRename},
		// By link: first both names, then only the new one.
		"link": {fsmirror.CrashAfterLink, fsmirror.CrashAfterRename},
	}
	for _, mode := range moveModes {
		t.Run(mode.name, func(t *testing.T) {
			m := newTree(t)
			mode.force(m)
			put(t, m, fsmirror.Claimed, "t1", "")
			var points []string
			m.Crash = func(point string) {
				points = append(points, point)
				inDone, inClaimed := lexists(t, m.Path(fsmirror.Done, "t1")), lexists(t, m.Path(fsmirror.Claimed, "t1"))
				switch point {
				case fsmirror.CrashAfterLink:
					if !inDone || !inClaimed {
						t.Errorf("at %s: done/t1 %v, claimed/t1 %v; want both", point, inDone, inClaimed)
					}
				case fsmirror.CrashAfterRename:
					if !inDone || inClaimed {
						t.Error("crash point reached before the rename")
					}
				}
			}
			if err := m.Move("t1", fsmirror.Claimed, fsmirror.Done); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(points, want[mode.name]) {
				t.Fatalf("crash points = %q, want %q", points, want[mode.name])
			}

			// A refused move never reaches a crash point.
			points = nil
			put(t, m, fsmirror.Claimed, "t1", "")
			m.Move("t1", fsmirror.Claimed, fsmirror.Done)
			if len(points) != 0 {
				t.Errorf("crash point reached by a refused move: %q", points)
			}
		})
	}
}

// Once renameat2 has said EINVAL, the Mirror moves by link without asking
// it again: a Fault that answers EINVAL only once still sees every later
// move go by link.
func TestMove_LinkModeIsRemembered(t *testing.T) {
	m := newTree(t)
	asked := 0
	m.Fault = func(fsmirror.Dir, string) unix.Errno {
		asked++
		if asked == 1 {
			return unix.EINVAL
		}
		return 0
	}
	var links int
	m.Crash = func(point string) {
		if point == fsmirror.CrashAfterLink {
			links++
		}
	}
	for i, id := range []string{"t1", "t2", "t3"} {
		put(t, m, fsmirror.Available, id, id)
		if err := m.Move(id, fsmirror.Available, fsmirror.Claimed); err != nil {
			t.Fatal(err)
		}
		if links != i+1 {
			t.Fatalf("move %d of %s: %d moves by link, want %d", i+1, id, links, i+1)
		}
	}
	if !fsmirror.LinkMoves(m) {
		t.Error("LinkMoves = false after EINVAL")
	}
	// Other errnos still fail the move, in link mode too.
	m.Fault = func(fsmirror.Dir, string) unix.Errno { return unix.EXDEV }
	if err := m.Move("t1", fsmirror.Claimed, fsmirror.Done); !errors.Is(err, unix.EXDEV) {
		t.Errorf("Move with EXDEV = %v", err)
	}
	if !lexists(t, m.Path(fsmirror.Claimed, "t1")) || lexists(t, m.Path(fsmirror.Done, "t1")) {
		t.Error("a failed move touched the file")
	}
}

// A move that finds its destination holding the very file it moves (one
// inode, two names: a move by link cut short between link and unlink)
// finishes by removing the old name; another file there is refused.
func TestMove_FinishesInterruptedLink(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
		put(t, m, fsmirror.Available, "t1", "payload")
		if err := os.Link(m.Path(fsmirror.Available, "t1"), m.Path(fsmirror.Claimed, "t1")); err != nil {
			t.Fatal(err)
		}
		if err := m.Move("t1", fsmirror.Available, fsmirror.Claimed); err != nil {
			t.Fatalf("Move = %v, want the interrupted move finished", err)
		}
		if lexists(t, m.Path(fsmirror.Available, "t1")) {
			t.Error("old name still there")
		}
		if b, err := os.ReadFile(m.Path(fsmirror.Claimed, "t1")); err != nil || string(b) != "payload" {
			t.Errorf("claimed/t1 = %q, %v", b, err)
		}
	})
}

// Batch moves and staged files (MoveFrom) keep their guarantees in both
// modes: moved, never over an existing file, nothing left in staging.
func TestBatch_MovesAndRefuses(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
		put(t, m, fsmirror.Available, "t1", "one")
		put(t, m, fsmirror.Available, "t2", "two")
		put(t, m, fsmirror.Claimed, "t2", "other")
		staged, err := m.Stage("add", strings.NewReader("three"), -1)
		if err != nil {
			t.Fatal(err)
		}
		b := m.NewBatch()
		if err := b.Move("t1", fsmirror.Available, fsmirror.Claimed); err != nil {
			t.Fatal(err)
		}
		var ee *fsmirror.ExistsError
		if err := b.Move("t2", fsmirror.Available, fsmirror.Claimed); !errors.As(err, &ee) {
			t.Errorf("Batch.Move onto another file = %v, want ExistsError", err)
		}
		if err := b.MoveFrom(fsmirror.Staging, staged, fsmirror.Available, "t3"); err != nil {
			t.Fatal(err)
		}
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{
			m.Path(fsmirror.Claimed, "t1"):   "one",
			m.Path(fsmirror.Available, "t2"): "two",
			m.Path(fsmirror.Claimed, "t2"):   "other",
			m.Path(fsmirror.Available, "t3"): "three",
		} {
			if b, err := os.ReadFile(path); err != nil || string(b) != want {
				t.Errorf("%s = %q, %v; want %q", path, b, err, want)
			}
		}
		if lexists(t, m.Path(fsmirror.Available, "t1")) {
			t.Error("available/t1 still there")
		}
	})
}

func TestSameFileAndDropLink(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Done, "t1", "x")
	os.Link(m.Path(fsmirror.Done, "t1"), m.Path(fsmirror.Available, "t1"))
	put(t, m, fsmirror.Done, "t2", "x")
	put(t, m, fsmirror.Available, "t2", "x") // same content, another file
	os.Symlink(m.Path(fsmirror.Done, "t1"), m.Path(fsmirror.Claimed, "t1"))

	for _, tt := range []struct {
		a, b fsmirror.Dir
		id   string
		want bool
	}{
		{fsmirror.Available, fsmirror.Done, "t1", true},
		{fsmirror.Available, fsmirror.Done, "t2", false},
		{fsmirror.Claimed, fsmirror.Done, "t1", false}, // a symlink is never the file
		{fsmirror.Failed, fsmirror.Done, "t1", false},  // missing
	} {
		if got, err := m.SameFile(tt.a, tt.b, tt.id); got != tt.want || err != nil {
			t.Errorf("SameFile(%s, %s, %s) = %v, %v; want %v", tt.a, tt.b, tt.id, got, err, tt.want)
		}
	}

	// Only a second name of the same file is removed.
	if dropped, err := m.DropLink(fsmirror.Available, "t2", fsmirror.Done, "t2"); dropped || err != nil {
		t.Errorf("DropLink(another file) = %v, %v", dropped, err)
	}
	if dropped, err := m.DropLink(fsmirror.Claimed, "t1", fsmirror.Done, "t1"); dropped || err != nil {
		t.Errorf("DropLink(symlink) = %v, %v", dropped, err)
	}
	if dropped, err := m.DropLink(fsmirror.Available, "t1", fsmirror.Done, "t1"); !dropped || err != nil {
		t.Errorf("DropLink(second name) = %v, %v", dropped, err)
	}
	if lexists(t, m.Path(fsmirror.Available, "t1")) || !lexists(t, m.Path(fsmirror.Done, "t1")) || !lexists(t, m.Path(fsmirror.Available, "t2")) {
		t.Error("DropLink removed the wrong names")
	}
	if dropped, err := m.DropLink(fsmirror.Done, "t1", fsmirror.Done, "t1"); dropped || err != nil {
		t.Errorf("DropLink(the name itself) = %v, %v", dropped, err)
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
