package fsmirror

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

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
	dirfd, err := m.dirfd(Staging)
	if err != nil {
		m.Unstage(name)
		return "", fmt.Errorf("stage: %w", err)
	}
	if err := unix.Fsync(dirfd); err != nil {
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
	defer m.release(name)
	// In the directory it was staged in: .fence/tmp may have been
	// replaced since (Refresh), and the name would be looked for in
	// the new one and left in the old.
	fd, ok := m.stagedIn(name)
	if !ok {
		var err error
		if fd, err = m.dirfd(Staging); err != nil {
			return err
		}
	}
	if err := unix.Unlinkat(fd, name, 0); err != nil && err != unix.ENOENT {
		return fmt.Errorf("unstage: %w", &fs.PathError{Op: "remove", Path: m.Path(Staging, name), Err: err})
	}
	return nil
}

// writeTemp writes r to a new, fsynced and closed file in .fence/tmp and
// returns its name. It does not fsync the staging directory: Stage does.
func (m *Mirror) writeTemp(prefix string, r io.Reader, maxBytes int64) (_ string, err error) {
	dirfd, err := m.dirfd(Staging)
	if err != nil {
		return "", err
	}
	// getrandom(2) directly: crypto/rand would link the FIPS module, whose
	// package initialisers every fencectl process would pay at start.
	var b [8]byte
	if n, err := unix.Getrandom(b[:], 0); err != nil || n != len(b) {
		return "", fmt.Errorf("getrandom for a staging name: %d bytes, %v", n, err)
	}
	name := prefix + "-" + hex.EncodeToString(b[:])
	path := m.Path(Staging, name)
	fd, linked, err := createHeld(dirfd, name)
	if err != nil {
		return "", &fs.PathError{Op: "create", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer func() {
		if err != nil {
			f.Close() // may already be closed; the error is the first one
			if linked {
				unix.Unlinkat(dirfd, name, 0)
			}
		}
	}()
	src := r
	if maxBytes >= 0 {
		src = io.LimitReader(r, maxBytes+1)
	}
	n, err := io.Copy(f, src)
	if err != nil {
		return "", err // already names the file
	}
	if maxBytes >= 0 && n > maxBytes {
		return "", &TooLargeError{Limit: maxBytes}
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if !linked {
		// The file gets its name only now, complete and locked.
		if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), dirfd, name, unix.AT_SYMLINK_FOLLOW); err != nil {
			return "", &fs.PathError{Op: "link", Path: path, Err: err}
		}
		linked = true
	}
	m.hold(name, f, dirfd)
	return name, nil
}

// createHeld creates a staging file that carries a shared flock from its
// first moment in the directory, so that sweepers (SweepStaging) can tell a
// file whose writer still lives from one left by a dead process. With
// O_TMPFILE the file is nameless until it is complete and locked; where the
// file system lacks it, the file is created by name and locked at once.
func createHeld(dirfd int, name string) (fd int, linked bool, err error) {
	fd, err = unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		fd, err = unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return -1, false, err
		}
		linked = true
	}
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		unix.Close(fd)
		if linked {
			unix.Unlinkat(dirfd, name, 0)
		}
		return -1, false, err
	}
	return fd, linked, nil
}

// heldFile is a staged file this process holds open, and the staging
// directory it was made in (a descriptor Refresh may have retired, which
// stays open until Close).
type heldFile struct {
	f     *os.File
	dirfd int
}

// hold keeps a staged file open (and so its flock held) until release.
func (m *Mirror) hold(name string, f *os.File, dirfd int) {
	m.heldMu.Lock()
	defer m.heldMu.Unlock()
	if m.held == nil {
		m.held = map[string]heldFile{}
	}
	m.held[name] = heldFile{f, dirfd}
}

// stagedIn returns the staging directory a file this process holds was
// made in.
func (m *Mirror) stagedIn(name string) (int, bool) {
	m.heldMu.Lock()
	defer m.heldMu.Unlock()
	h, ok := m.held[name]
	return h.dirfd, ok && h.dirfd >= 0
}

// release closes a staged file this process held, dropping its flock.
func (m *Mirror) release(name string) {
	m.heldMu.Lock()
	h, ok := m.held[name]
	delete(m.held, name)
	m.heldMu.Unlock()
	if ok {
		h.f.Close()
	}
}

// SweepStaging moves to .fence/quarantine every staged file whose writer
// is gone: a process that staged content and died before its commit (or
// whose commit failed) leaves it behind. A live writer holds a shared
// flock on its staged file from the moment the file has a name, so a file
// that can be locked exclusively has no writer. It returns the names moved;
// with dryRun it only returns the names it would move.
func (m *Mirror) SweepStaging(dryRun bool) ([]string, error) {
	moved, _, err := m.Sweep(dryRun)
	return moved, err
}

// Sweep is SweepStaging that also returns the names of files an adoption
// staged (AdoptPrefix, see Batch.Adopt) and no live adopter holds, which
// it leaves where they are: only the journal can say whether their
// adoption committed. One this process holds is its own, from an
// adoption that is over (a sweep runs before a writer adopts): it lets go
// of it.
func (m *Mirror) Sweep(dryRun bool) (moved, adopting []string, err error) {
	dirfd, err := m.dirfd(Staging)
	if err != nil {
		return nil, nil, err
	}
	entries, err := m.List(Staging)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		if e.Kind != Regular || strings.HasPrefix(e.Name, UnpublishedPrefix) {
			continue // an unpublished output is the journal's (KeepUnpublished)
		}
		if strings.HasPrefix(e.Name, AdoptPrefix) {
			m.release(e.Name)
			if fd, err := unix.Openat(dirfd, e.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
				live := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil
				unix.Close(fd)
				if live {
					continue // its adopter lives (on another host)
				}
			}
			adopting = append(adopting, e.Name)
			continue
		}
		fd, err := unix.Openat(dirfd, e.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone meanwhile
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
			unix.Close(fd) // its writer lives
			continue
		}
		if dryRun {
			unix.Close(fd)
			moved = append(moved, e.Name)
			continue
		}
		_, err = m.Quarantine(Staging, e.Name)
		unix.Close(fd)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return moved, adopting, err
		}
		if err == nil {
			moved = append(moved, e.Name)
		}
	}
	return moved, adopting, nil
}
