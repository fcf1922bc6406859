package bolt

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Where renameat2 lacks RENAME_NOREPLACE (EINVAL on NFS), the journal's
// renames go by link and unlink and still never replace a file.
func TestRenameNoReplace_LinkFallback(t *testing.T) {
	for _, errno := range []unix.Errno{unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP} {
		t.Run(errno.Error(), func(t *testing.T) {
			called := false
			renameat2 = func(int, string, int, string, uint) error { called = true; return errno }
			t.Cleanup(func() { renameat2 = unix.Renameat2 })
			dir := t.TempDir()
			a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
			os.WriteFile(a, []byte("a"), 0o600)
			os.WriteFile(c, []byte("c"), 0o600)
			if err := renameNoReplace(a, b); err != nil || !called {
				t.Fatalf("renameNoReplace = %v (renameat2 asked: %v)", err, called)
			}
			if _, err := os.Lstat(a); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("old name still there: %v", err)
			}
			if got, _ := os.ReadFile(b); string(got) != "a" {
				t.Errorf("b = %q", got)
			}
			if err := renameNoReplace(b, c); !errors.Is(err, fs.ErrExist) {
				t.Errorf("onto an existing file = %v, want fs.ErrExist", err)
			}
			if got, _ := os.ReadFile(c); string(got) != "c" {
				t.Errorf("c overwritten: %q", got)
			}
			if got, _ := os.ReadFile(b); string(got) != "a" {
				t.Errorf("b after a refused rename = %q", got)
			}
		})
	}
}
