package fsmirror_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencectl/fencectl/fsmirror"
)

var allDirs = []fsmirror.Dir{
	fsmirror.Inbox, fsmirror.Available, fsmirror.Claimed, fsmirror.Done,
	fsmirror.Failed, fsmirror.Out, fsmirror.Meta, fsmirror.Staging,
}

func TestCreate_MakesLayoutAndIsIdempotent(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "tree")
	m, err := fsmirror.Create(root)
	if err != nil {
		t.Fatal(err)
	}
	put(t, m, fsmirror.Available, "t1", "keep me")
	m.Close()

	m, err = fsmirror.Create(root) // again, over an existing tree
	if err != nil {
		t.Fatalf("second Create: %v", err)
	}
	defer m.Close()
	if m.Root() != root {
		t.Errorf("Root() = %q, want %q", m.Root(), root)
	}
	for _, d := range allDirs {
		fi, err := os.Lstat(m.Path(d, ""))
		if err != nil || !fi.IsDir() {
			t.Errorf("%s: not a directory (%v)", d, err)
		}
	}
	for _, d := range []fsmirror.Dir{fsmirror.Meta, fsmirror.Staging} {
		fi, _ := os.Lstat(m.Path(d, ""))
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s mode %v, want private", d, fi.Mode().Perm())
		}
	}
	if ok, err := m.Exists(fsmirror.Available, "t1"); !ok || err != nil {
		t.Errorf("second Create lost a task: %v %v", ok, err)
	}
	if got, want := fsmirror.StateDirs, []fsmirror.Dir{fsmirror.Waiting, fsmirror.Available, fsmirror.Claimed, fsmirror.Done, fsmirror.Failed}; !slicesEqual(got, want) {
		t.Errorf("StateDirs = %v, want %v", got, want)
	}
}

func slicesEqual(a, b []fsmirror.Dir) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCreate_RefusesSymlinkedStateDir(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "tree")
	elsewhere := filepath.Join(tmp, "elsewhere")
	for _, d := range []string{root, elsewhere} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(elsewhere, filepath.Join(root, "claimed")); err != nil {
		t.Fatal(err)
	}
	_, err := fsmirror.Create(root)
	var nd *fsmirror.NotDirectoryError
	if !errors.As(err, &nd) || nd.Kind != fsmirror.Symlink {
		t.Fatalf("Create = %v, want NotDirectoryError for a symlink", err)
	}
	if !strings.HasSuffix(nd.Path, "/claimed") {
		t.Errorf("Path = %q, want the claimed dir", nd.Path)
	}
	if _, err := fsmirror.Open(root); !errors.As(err, &nd) {
		t.Errorf("Open = %v, want NotDirectoryError", err)
	}
}

func TestCreate_RefusesFileInPlaceOfDir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	os.Mkdir(root, 0o755)
	os.WriteFile(filepath.Join(root, "done"), nil, 0o644)
	_, err := fsmirror.Create(root)
	var nd *fsmirror.NotDirectoryError
	if !errors.As(err, &nd) || nd.Kind != fsmirror.Regular {
		t.Fatalf("Create = %v, want NotDirectoryError for a file", err)
	}
}

func TestOpen_MissingTreeSuggestsInit(t *testing.T) {
	root := t.TempDir() // exists, but is not a tree
	_, err := fsmirror.Open(root)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open = %v, want fs.ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), "fencectl init") || !strings.Contains(err.Error(), root) {
		t.Errorf("message %q should name the path and `fencectl init`", err)
	}
	if lexists(t, filepath.Join(root, "inbox")) {
		t.Error("Open created a directory")
	}
	if _, err := fsmirror.Open(filepath.Join(root, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a missing root = %v, want fs.ErrNotExist", err)
	}
}

func TestOpen_RelativeRootIsMadeAbsolute(t *testing.T) {
	dir := t.TempDir()
	newTreeAt(t, filepath.Join(dir, "tree"))
	t.Chdir(dir)
	m, err := fsmirror.Open("tree")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if want := filepath.Join(dir, "tree", "claimed", "t1"); m.Path(fsmirror.Claimed, "t1") != want {
		t.Errorf("Path = %q, want %q", m.Path(fsmirror.Claimed, "t1"), want)
	}
}

func newTreeAt(t *testing.T, root string) {
	t.Helper()
	m, err := fsmirror.Create(root)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

func TestClose_Twice(t *testing.T) {
	m, err := fsmirror.Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := m.List(fsmirror.Inbox); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("List after Close = %v, want fs.ErrClosed", err)
	}
}

func TestCheckPerms(t *testing.T) {
	m := newTree(t)
	if w := m.CheckPerms(); w != "" {
		t.Errorf("fresh tree: unexpected warning %q", w)
	}
	if err := os.Chmod(m.Root(), 0o777); err != nil {
		t.Fatal(err)
	}
	if w := m.CheckPerms(); !strings.Contains(w, m.Root()) {
		t.Errorf("world-writable root: warning %q does not name it", w)
	}
}
