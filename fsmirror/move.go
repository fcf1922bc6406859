package fsmirror

import (
	"errors"
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
	err := m.move(from, src, to, id)
	if from == Staging && errors.Is(err, fs.ErrNotExist) {
		// Kept after an earlier try failed (KeepUnpublished), as
		// Batch.MoveFrom finds it: the settle of an add whose move
		// failed looked for the first name only, and the task was then
		// failed as missing (found from outside).
		if again := m.move(from, UnpublishedPrefix+src, to, id); !errors.Is(again, fs.ErrNotExist) {
			err = again
		}
	}
	if err != nil {
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

// CrashAfterLink is the crash point of a move by link (see linkMove)
// between the link and the removal of the old name: the file is in both
// directories, one inode under two names.
const CrashAfterLink = "move:after-link"

// rename is the checked renameat2(RENAME_NOREPLACE), without fsyncs, or
// its equivalent by link and unlink where the file system lacks
// RENAME_NOREPLACE (see linkMove).
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
			if !noReplaceUnsupported(errno) {
				return &fs.PathError{Op: "rename", Path: m.Path(from, src), Err: errno}
			}
			m.linkMoves.Store(true) // as renameat2 says on NFS
		}
	}
	if m.linkMoves.Load() {
		return m.linkMove(fromfd, from, src, tofd, to, dst)
	}
	// The check above and the rename are two steps: an entry swapped in
	// between is moved, not followed, since rename never follows the last
	// component. NOREPLACE is what keeps a task from being overwritten.
	err = unix.Renameat2(fromfd, src, tofd, dst, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		if m.Trace != nil {
			m.Trace("rename", m.Path(from, src), m.Path(to, dst))
		}
		return nil
	case err == unix.EEXIST:
		return m.occupied(fromfd, from, src, tofd, to, dst)
	case noReplaceUnsupported(err):
		// NFS, CIFS and some FUSE file systems: remember it, so that no
		// later move of this Mirror asks again.
		m.linkMoves.Store(true)
		return m.linkMove(fromfd, from, src, tofd, to, dst)
	}
	return &fs.PathError{Op: "rename", Path: m.Path(from, src), Err: err}
}

// noReplaceUnsupported reports whether renameat2 answered errno because
// the file system does not do RENAME_NOREPLACE (EINVAL on NFS, ENOSYS or
// EOPNOTSUPP elsewhere). For a regular file and a plain name it has no
// other reason to.
func noReplaceUnsupported(errno error) bool {
	return errno == unix.EINVAL || errno == unix.ENOSYS || errno == unix.EOPNOTSUPP
}

// linkMove moves src to dst by link(2), then unlink(2) of src: the
// equivalent of renameat2(RENAME_NOREPLACE) on a file system that lacks
// it. linkat fails with EEXIST when dst exists, atomically even on NFS
// (the server decides), so a move still never replaces a file. Without
// AT_SYMLINK_FOLLOW it links the entry itself, never what it points to
// (and checkRegular has refused anything but a regular file). The file is
// never in neither place: the destination directory is fsynced before
// the old name goes, and a crash in between leaves one file under two
// names, which Move finishes (see occupied) and DropLink, settle and
// replay clean up.
func (m *Mirror) linkMove(fromfd int, from Dir, src string, tofd int, to Dir, dst string) error {
	switch err := unix.Linkat(fromfd, src, tofd, dst, 0); err {
	case nil:
	case unix.EEXIST:
		return m.occupied(fromfd, from, src, tofd, to, dst)
	case unix.EPERM, unix.EOPNOTSUPP, unix.ENOSYS, unix.EMLINK:
		return fmt.Errorf("%w (the file system of %s has no renameat2 RENAME_NOREPLACE, so fencectl moves a task by link and unlink; "+
			"the kernel allows a hard link only to a file one owns or may read and write (fs.protected_hardlinks), "+
			"so make task files writable by every user of the tree (umask 002 and a shared group); a file system without hard links cannot hold a tree)",
			&fs.PathError{Op: "link", Path: m.Path(from, src), Err: err}, m.root)
	default:
		return &fs.PathError{Op: "link", Path: m.Path(from, src), Err: err}
	}
	if m.Crash != nil {
		m.Crash(CrashAfterLink)
	}
	// The new name durable before the old one can be durably gone.
	if err := m.syncDir(to); err != nil {
		return err
	}
	return m.unlinkSame(fromfd, from, src, tofd, dst)
}

// occupied answers a move whose destination exists: *ExistsError, unless
// the destination is the very file being moved (same device and inode: a
// move by link whose unlink a crash cut short), in which case the move is
// finished by removing the old name.
func (m *Mirror) occupied(fromfd int, from Dir, src string, tofd int, to Dir, dst string) error {
	if same, err := sameFile(fromfd, src, tofd, dst); err == nil && same {
		return m.unlinkSame(fromfd, from, src, tofd, dst)
	}
	return &ExistsError{Path: m.Path(to, dst)}
}

// unlinkSame removes src once dst names the same file. It checks again
// just before: an entry put in src's place since (by hand) is another
// file, and is left for replay to report. A src already gone is fine.
func (m *Mirror) unlinkSame(fromfd int, from Dir, src string, tofd int, dst string) error {
	if same, err := sameFile(fromfd, src, tofd, dst); err != nil || !same {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := unix.Unlinkat(fromfd, src, 0); err != nil && err != unix.ENOENT {
		return &fs.PathError{Op: "unlink (file already linked in its new place)", Path: m.Path(from, src), Err: err}
	}
	return nil
}

// sameFile reports whether a in dirfd ad and b in dirfd bd are one
// regular file (same device and inode), without following a symlink. A
// missing entry gives an error matching fs.ErrNotExist.
func sameFile(ad int, a string, bd int, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Fstatat(ad, a, &sa, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, err
	}
	if err := unix.Fstatat(bd, b, &sb, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, err
	}
	return kindOf(sa.Mode) == Regular && kindOf(sb.Mode) == Regular && idOf(&sa) == idOf(&sb), nil
}

// SameFile reports whether name in a and name in b are one regular file
// under two names (same device and inode), as a move by link that a crash
// cut short leaves it; false if either is missing or not a regular file.
func (m *Mirror) SameFile(a, b Dir, name string) (bool, error) {
	if err := validComponent(name, "file name"); err != nil {
		return false, err
	}
	ad, err := m.dirfd(a)
	if err != nil {
		return false, err
	}
	bd, err := m.dirfd(b)
	if err != nil {
		return false, err
	}
	same, err := sameFile(ad, name, bd, name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, &fs.PathError{Op: "lstat", Path: m.Path(a, name), Err: err}
	}
	return same, nil
}

// DropLink removes name in dir if it is a second name of the file id in
// keep (same device and inode): the old name that a move by link left
// when a crash fell between its link and its unlink. Nothing is lost, the
// file stays in keep. It reports whether it removed the name; a name that
// is missing or another file is left alone (false, nil): a real second
// copy is for Quarantine. dir is fsynced after a removal.
func (m *Mirror) DropLink(dir Dir, name string, keep Dir, id string) (bool, error) {
	if err := validComponent(name, "file name"); err != nil {
		return false, err
	}
	if err := ValidateID(id); err != nil {
		return false, err
	}
	fd, err := m.dirfd(dir)
	if err != nil {
		return false, err
	}
	kfd, err := m.dirfd(keep)
	if err != nil {
		return false, err
	}
	if dir == keep && name == id {
		return false, nil
	}
	if same, err := sameFile(fd, name, kfd, id); err != nil || !same {
		return false, nil
	}
	if err := m.unlinkSame(fd, dir, name, kfd, id); err != nil {
		return false, fmt.Errorf("remove the second name %s of %s: %w", m.Path(dir, name), m.Path(keep, id), err)
	}
	if err := m.syncDir(dir); err != nil {
		return true, err
	}
	return true, nil
}

func (m *Mirror) syncDir(d Dir) error {
	fd, err := m.dirfd(d)
	if err != nil {
		return err
	}
	if err := unix.Fsync(fd); err != nil {
		return &fs.PathError{Op: "fsync (file already renamed)", Path: m.Path(d, ""), Err: err}
	}
	if m.Trace != nil {
		m.Trace("sync", m.Path(d, ""), "")
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
