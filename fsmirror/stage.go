package fsmirror

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Stage copies r into a new file .fence/tmp/<prefix>-<random hex> and
// returns its name (not its path) for MoveFrom. The file is fsynced and
// closed and the staging directory fsynced before Stage returns, so the
// later rename publishes complete, durable content. The file is created
// with mode 0644 (less the umask). maxBytes < 0 means no limit; input longer
// than maxBytes gives a *TooLargeError. On any error the partial file is
// removed.
func (m *Mirror) Stage(prefix string, r io.Reader, maxBytes int64) (string, error) {
	if err := validateName(prefix, "staging prefix"); err != nil {
		return "", err
	}
	name, err := m.writeTemp(prefix, r, maxBytes)
	if err != nil {
		return "", fmt.Errorf("stage: %w", err)
	}
	if err := unix.Fsync(m.fds[Staging]); err != nil {
		m.Unstage(name)
		return "", fmt.Errorf("stage: %w", &fs.PathError{Op: "fsync", Path: m.Path(Staging, ""), Err: err})
	}
	return name, nil
}

// Unstage removes a staging file, for when the journal commit that was to
// publish it failed. A file that is already gone is not an error.
func (m *Mirror) Unstage(name string) error {
	if err := validComponent(name, "staging file name"); err != nil {
		return err
	}
	fd, err := m.dirfd(Staging)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(fd, name, 0); err != nil && err != unix.ENOENT {
		return fmt.Errorf("unstage: %w", &fs.PathError{Op: "remove", Path: m.Path(Staging, name), Err: err})
	}
	return nil
}

// writeTemp writes r to a new, fsynced and closed file in .fence/tmp and
// returns its name. It does not fsync the staging directory: Stage does, and
// WriteAtomic renames the file away at once.
func (m *Mirror) writeTemp(prefix string, r io.Reader, maxBytes int64) (_ string, err error) {
	dirfd, err := m.dirfd(Staging)
	if err != nil {
		return "", err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	name := prefix + "-" + hex.EncodeToString(b[:])
	path := m.Path(Staging, name)
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return "", &fs.PathError{Op: "create", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer func() {
		if err != nil {
			f.Close() // may already be closed; the error is the first one
			unix.Unlinkat(dirfd, name, 0)
		}
	}()
	src := r
	if maxBytes >= 0 {
		src = io.LimitReader(r, maxBytes+1)
	}
	n, err := io.Copy(f, src)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if maxBytes >= 0 && n > maxBytes {
		return "", &TooLargeError{Limit: maxBytes}
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return name, nil
}
