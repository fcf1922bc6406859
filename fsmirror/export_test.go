package fsmirror

// Whole-file operations the tests use to exercise staging, publishing and
// the regular-file checks in one call; fencectl itself stages before taking
// the lock and publishes after the commit (Stage, Publish), and reads no
// task file.

import (
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// WriteAtomic writes r to out/<task>/<name>, replacing any file of that name:
// outputs may be rewritten, and a reader sees the old content or the new,
// never a mix. task and name follow the id rule. out/<task> is created if
// missing (a symlink there is refused with a *NotDirectoryError). The data
// is written to .fence/tmp, fsynced and renamed into place, then out/<task>
// is fsynced, and out/ too if out/<task> was created.
func (m *Mirror) WriteAtomic(task, name string, r io.Reader) error {
	if err := ValidateID(task); err != nil {
		return err
	}
	if err := validateName(name, "output name"); err != nil {
		return err
	}
	if err := m.writeAtomic(task, name, r); err != nil {
		return fmt.Errorf("write output %s: %w", m.Path(Out, task+"/"+name), err)
	}
	return nil
}

func (m *Mirror) writeAtomic(task, name string, r io.Reader) error {
	tmp, err := m.writeTemp("out", r, -1)
	if err != nil {
		return err
	}
	defer m.release(tmp)
	if err := m.publish(tmp, task, name); err != nil {
		if fd, err := m.dirfd(Staging); err == nil {
			unix.Unlinkat(fd, tmp, 0)
		}
		return err
	}
	return nil
}

// OpenTask opens task file id in dir for reading. It opens with
// O_NOFOLLOW|O_NONBLOCK and checks the result with fstat, so a symlink is
// refused and a FIFO put in the file's place never blocks; anything but a
// regular file gives a *NotRegularError.
func (m *Mirror) OpenTask(dir Dir, id string) (*os.File, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	dirfd, err := m.dirfd(dir)
	if err != nil {
		return nil, err
	}
	path := m.Path(dir, id)
	// Check before opening too: opening a device can have side effects.
	if err := m.checkRegular(dirfd, dir, id); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(dirfd, id, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == unix.ELOOP {
		return nil, &NotRegularError{Path: path, Kind: Symlink}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if k := kindOf(st.Mode); k != Regular {
		unix.Close(fd)
		return nil, &NotRegularError{Path: path, Kind: k}
	}
	// O_NONBLOCK only guarded the open; reads of a regular file never block.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// LinkMoves reports whether m moves by link and unlink (renameat2 said, or
// a Fault pretended, that the file system lacks RENAME_NOREPLACE).
func LinkMoves(m *Mirror) bool { return m.linkMoves.Load() }

// QuietListings counts the listings of quiet directories actually read
// (see WatchQuiet).
func (m *Mirror) QuietListings() int {
	q := m.quietFor(Inbox)
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.listed
}

// WatchSmallDirs makes WatchQuiet watch directories of any size, for
// tests, until the test ends.
func WatchSmallDirs(t interface{ Cleanup(func()) }) {
	old := quietMinSize
	quietMinSize = 0
	t.Cleanup(func() { quietMinSize = old })
}
