package fsmirror

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Publish renames the staged file (see Stage) to out/<task>/<name>,
// replacing any file of that name: a reader sees the old content or the new,
// never a mix. out/<task> is created if missing (a symlink there is refused
// with a *NotDirectoryError), and fsynced, and out/ too if out/<task> was
// created. It
// is the second half of a fenced write: stage before taking the lock,
// publish only once the token has been checked and the event committed. A
// staged file that is gone gives an error matching fs.ErrNotExist.
func (m *Mirror) Publish(staged, task, name string) error {
	if err := validComponent(staged, "staging file name"); err != nil {
		return err
	}
	if err := ValidateID(task); err != nil {
		return err
	}
	if err := validateName(name, "output name"); err != nil {
		return err
	}
	err := m.publish(staged, task, name)
	if errors.Is(err, fs.ErrNotExist) {
		// Set aside by KeepUnpublished after an earlier try failed.
		if again := m.publish(UnpublishedPrefix+staged, task, name); !errors.Is(again, fs.ErrNotExist) {
			err = again
		}
	}
	if err != nil {
		return fmt.Errorf("write output %s: %w", m.Path(Out, task+"/"+name), err)
	}
	m.release(staged)
	return nil
}

// StagedHeld reports whether a live process holds the staged file (the
// writer that staged it, until it is published or set aside).
func (m *Mirror) StagedHeld(staged string) bool {
	if validComponent(staged, "staging file name") != nil {
		return false
	}
	dirfd, err := m.dirfd(Staging)
	if err != nil {
		return false
	}
	fd, err := unix.Openat(dirfd, staged, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil
}

// UnpublishedPrefix marks a staged output whose commit landed and whose
// publish failed (another user's out/ID, a full disk): the journal names
// it, so it is no orphan of a writer that died before its commit, and
// Sweep leaves it for replay to publish. Unmarked, the next writer's
// sweep set the only copy of a recorded output aside as "died before its
// commit" (found from outside).
const UnpublishedPrefix = "unpublished-"

// KeepUnpublished marks the staged output staged as committed and not
// yet published (UnpublishedPrefix); Publish finds it under either name.
func (m *Mirror) KeepUnpublished(staged string) error {
	if err := validComponent(staged, "staging file name"); err != nil {
		return err
	}
	fd, err := m.dirfd(Staging)
	if err != nil {
		return err
	}
	if err := unix.Renameat(fd, staged, fd, UnpublishedPrefix+staged); err != nil {
		return &fs.PathError{Op: "rename", Path: m.Path(Staging, staged), Err: err}
	}
	m.release(staged)
	return unix.Fsync(fd)
}

// StagedExists reports whether a staged file is still waiting in .fence/tmp.
func (m *Mirror) StagedExists(staged string) (bool, error) {
	if err := validComponent(staged, "staging file name"); err != nil {
		return false, err
	}
	fd, err := m.dirfd(Staging)
	if err != nil {
		return false, err
	}
	err = m.checkRegular(fd, Staging, staged)
	if errors.Is(err, fs.ErrNotExist) {
		err = m.checkRegular(fd, Staging, UnpublishedPrefix+staged)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (m *Mirror) publish(staged, task, name string) error {
	outfd, err := m.dirfd(Out)
	if err != nil {
		return err
	}
	created := false
	switch err := unix.Mkdirat(outfd, task, 0o755); err {
	case nil:
		created = true
	case unix.EEXIST:
	default:
		return &fs.PathError{Op: "mkdir", Path: m.Path(Out, task), Err: err}
	}
	taskfd, err := openDir(outfd, task, m.Path(Out, task))
	if err != nil {
		return err
	}
	defer unix.Close(taskfd)
	stagefd, err := m.dirfd(Staging)
	if err != nil {
		return err
	}
	if m.Fault != nil {
		if errno := m.Fault(Staging, staged); errno != 0 {
			return &fs.PathError{Op: "rename", Path: m.Path(Staging, staged), Err: errno}
		}
	}
	if err := unix.Renameat(stagefd, staged, taskfd, name); err != nil {
		return &fs.PathError{Op: "rename", Path: m.Path(Staging, staged), Err: err}
	}
	if err := unix.Fsync(taskfd); err != nil {
		return &fs.PathError{Op: "fsync", Path: m.Path(Out, task), Err: err}
	}
	if created {
		if err := unix.Fsync(outfd); err != nil {
			return &fs.PathError{Op: "fsync", Path: m.Path(Out, ""), Err: err}
		}
	}
	return nil
}

// PrepareOutput makes out/<task> (durably) if it is missing, for a fenced
// write about to commit: what is left after the commit is then a rename
// of the staged file, which needs no new inode. A full file system (no
// inode left for the directory) refuses the write before it commits,
// instead of failing it after, with the change recorded.
func (m *Mirror) PrepareOutput(task string) error {
	if err := ValidateID(task); err != nil {
		return err
	}
	outfd, err := m.dirfd(Out)
	if err != nil {
		return err
	}
	switch err := unix.Mkdirat(outfd, task, 0o755); err {
	case nil:
		if err := unix.Fsync(outfd); err != nil {
			return &fs.PathError{Op: "fsync", Path: m.Path(Out, ""), Err: err}
		}
	case unix.EEXIST:
		// Made by another user (root, a group member): the output could
		// not be renamed into it after the commit, and the commit would
		// record an output that never appears (found from outside).
		var st unix.Stat_t
		if err := unix.Fstatat(outfd, task, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && os.Geteuid() != 0 && int(st.Uid) != os.Geteuid() {
			// Writable (a sticky 1777 one), but another user's: a file of
			// theirs in it cannot be replaced, and stays the output.
			return &fs.PathError{Op: "write into", Path: m.Path(Out, task), Err: fmt.Errorf("it belongs to another user (uid %d): give it back to the tree's user, or move it aside", st.Uid)}
		}
		if err := unix.Faccessat(outfd, task, unix.W_OK|unix.X_OK, 0); err != nil { // CheckOutput refused a symlink
			return &fs.PathError{Op: "write into", Path: m.Path(Out, task), Err: fmt.Errorf("%w (another user's directory? give it back to the tree's user, or move it aside)", err)}
		}
	default:
		return &fs.PathError{Op: "mkdir", Path: m.Path(Out, task), Err: err}
	}
	return nil
}

// ValidateOutputName checks an output name against the id rule; the error
// says "output name" and quotes a long name shortened.
func ValidateOutputName(name string) error { return validateName(name, "output name") }

// CheckOutput reports whether out/<task>/<name> can be written: out/<task>
// must be absent or a real directory, and <name> in it absent, a regular
// file or a symlink (replaced, never followed). A fenced write checks this before it commits, so an odd entry
// planted in out/ fails that write alone.
func (m *Mirror) CheckOutput(task, name string) error {
	if err := ValidateID(task); err != nil {
		return err
	}
	if err := validateName(name, "output name"); err != nil {
		return err
	}
	outfd, err := m.dirfd(Out)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	switch err := unix.Fstatat(outfd, task, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		return nil
	case err != nil:
		return &fs.PathError{Op: "lstat", Path: m.Path(Out, task), Err: err}
	case kindOf(st.Mode) != Directory:
		return &NotDirectoryError{Path: m.Path(Out, task), Kind: kindOf(st.Mode)}
	}
	taskfd, err := openDir(outfd, task, m.Path(Out, task))
	if err != nil {
		return err
	}
	defer unix.Close(taskfd)
	switch err := unix.Fstatat(taskfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		return nil
	case err != nil:
		return &fs.PathError{Op: "lstat", Path: m.Path(Out, task+"/"+name), Err: err}
	case kindOf(st.Mode) != Regular && kindOf(st.Mode) != Symlink:
		// A symlink is fine: the rename replaces the link itself, never
		// what it points to. A directory or a FIFO would make it fail.
		return &NotRegularError{Path: m.Path(Out, task+"/"+name), Kind: kindOf(st.Mode)}
	}
	return nil
}
