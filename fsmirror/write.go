package fsmirror

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

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
	if err := m.publish(tmp, task, name); err != nil {
		unix.Unlinkat(m.fds[Staging], tmp, 0)
		return err
	}
	return nil
}

// Publish renames the staged file (see Stage) to out/<task>/<name>,
// replacing any file of that name, with the guarantees of WriteAtomic. It
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
	if err := m.publish(staged, task, name); err != nil {
		return fmt.Errorf("write output %s: %w", m.Path(Out, task+"/"+name), err)
	}
	return nil
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
	if err := unix.Renameat(m.fds[Staging], staged, taskfd, name); err != nil {
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
