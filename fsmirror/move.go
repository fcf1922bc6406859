package fsmirror

import (
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// CrashAfterRename is the crash point between a move's rename and its
// directory fsyncs: the file is in its new place, but the move may not yet
// survive a power loss.
const CrashAfterRename = "move:after-rename"

// Move moves task id from one directory to another. The source must be a
// regular file (else *NotRegularError) and the destination must be free
// (else *ExistsError: a move never replaces a file). A missing source gives
// an error matching fs.ErrNotExist, which replay reads as "already moved".
// On success the destination directory and then the source directory have
// been fsynced.
func (m *Mirror) Move(id string, from, to Dir) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if err := m.move(from, id, to, id); err != nil {
		return fmt.Errorf("move %s from %s to %s: %w", id, from, to, err)
	}
	return nil
}

// MoveFrom moves the file src in directory from to directory to as task id,
// with the guarantees of Move. src need not be a task id (a staging file is
// named "<prefix>-<random>"), but it must be a single file name.
func (m *Mirror) MoveFrom(from Dir, src string, to Dir, id string) error {
	if err := validComponent(src, "file name"); err != nil {
		return err
	}
	if err := ValidateID(id); err != nil {
		return err
	}
	if err := m.move(from, src, to, id); err != nil {
		return fmt.Errorf("move %s to %s as %s: %w", m.Path(from, src), to, id, err)
	}
	if from == Staging {
		m.release(src)
	}
	return nil
}

// move does the checked rename and the two fsyncs; names are validated.
func (m *Mirror) move(from Dir, src string, to Dir, dst string) error {
	if err := m.rename(from, src, to, dst); err != nil {
		return err
	}
	if m.Crash != nil {
		m.Crash(CrashAfterRename)
	}
	// Destination first, so the old name is never durably gone while the
	// new one is not yet durable.
	if err := m.syncDir(to); err != nil {
		return err
	}
	return m.syncDir(from)
}

// rename is the checked renameat2(RENAME_NOREPLACE), without fsyncs.
func (m *Mirror) rename(from Dir, src string, to Dir, dst string) error {
	fromfd, err := m.dirfd(from)
	if err != nil {
		return err
	}
	tofd, err := m.dirfd(to)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("source and destination are the same directory")
	}
	if err := m.checkRegular(fromfd, from, src); err != nil {
		return err
	}
	if m.Fault != nil {
		if errno := m.Fault(from, src); errno != 0 {
			return &fs.PathError{Op: "rename", Path: m.Path(from, src), Err: errno}
		}
	}
	// The check above and the rename are two steps: an entry swapped in
	// between is moved, not followed, since rename never follows the last
	// component. NOREPLACE is what keeps a task from being overwritten.
	err = unix.Renameat2(fromfd, src, tofd, dst, unix.RENAME_NOREPLACE)
	switch err {
	case nil:
		return nil
	case unix.EEXIST:
		return &ExistsError{Path: m.Path(to, dst)}
	case unix.EINVAL, unix.ENOSYS:
		return fmt.Errorf("renameat2 RENAME_NOREPLACE is not supported on the file system of %s: %w", m.root, err)
	}
	return &fs.PathError{Op: "rename", Path: m.Path(from, src), Err: err}
}

func (m *Mirror) syncDir(d Dir) error {
	fd, err := m.dirfd(d)
	if err != nil {
		return err
	}
	if err := unix.Fsync(fd); err != nil {
		return &fs.PathError{Op: "fsync (file already renamed)", Path: m.Path(d, ""), Err: err}
	}
	return nil
}

// checkRegular returns nil if name in dir is a regular file, without
// following a symlink.
func (m *Mirror) checkRegular(dirfd int, dir Dir, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: m.Path(dir, name), Err: err}
	}
	if k := kindOf(st.Mode); k != Regular {
		return &NotRegularError{Path: m.Path(dir, name), Kind: k}
	}
	return nil
}
