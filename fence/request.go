package fence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal/record"
)

// requestDir is where request locks live, under .fence/.
const requestDir = "requests"

// RequestLock is a claim request id (--request-id) held by a live process:
// an exclusive flock on .fence/requests/<hash of agent and id>. The kernel
// drops it when the process dies, however it dies, so a request id can
// recover a claim whose answer was lost (its claimer is gone) but is never
// handed to a second process while the first still works on it. `fencectl
// run` holds it for as long as CMD and everything CMD started may run.
type RequestLock struct {
	agent, id, path string
	metaDir, name   string // path is name in .fence/requests under metaDir
	f               *os.File
}

// RequestInUseError refuses a claim whose request id is held by another
// live process. It unwraps to a *NotAvailableError: exit 4, as for any
// claim that cannot be granted now but may be later.
type RequestInUseError struct {
	Agent, RequestID string
	Lock             string // the lock file's path
}

func (e *RequestInUseError) Error() string {
	return fmt.Sprintf("request id %q of agent %s is in use by another live process (it holds %s): its claim is never handed to two processes at once; nothing changed, try again once that process has ended", e.RequestID, e.Agent, e.Lock)
}

func (e *RequestInUseError) Unwrap() error {
	return &NotAvailableError{State: record.Claimed, Op: "claim --request-id"}
}

// LockRequest takes the lock of agent's request id, or refuses with a
// *RequestInUseError if a live process holds it. It never waits.
func (t *Tree) LockRequest(agent, id string) (*RequestLock, error) {
	if id == "" {
		return nil, invalidValue(InputRequestID, RuleMissing, nil, "")
	}
	if err := checkRequestID(id); err != nil {
		return nil, err
	}
	if err := t.refuseForeign(); err != nil {
		return nil, err
	}
	mode := os.FileMode(0o700)
	if st, err := os.Stat(t.metaDir); err == nil {
		mode = st.Mode().Perm()
	}
	dfd, err := openPrivateDir(t.metaDir, requestDir, uint32(mode), true)
	if err != nil {
		return nil, fmt.Errorf("lock request id: %w", err)
	}
	defer unix.Close(dfd)
	sum := sha256.Sum256([]byte(agent + "\x00" + id))
	name := hex.EncodeToString(sum[:16])
	path := filepath.Join(t.metaDir, requestDir, name)
	for {
		fd, err := unix.Openat(dfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, uint32(mode&0o666))
		if err != nil {
			return nil, fmt.Errorf("lock request id: %w", &os.PathError{Op: "open", Path: path, Err: err})
		}
		f := os.NewFile(uintptr(fd), path)
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &RequestInUseError{Agent: agent, RequestID: id, Lock: path}
			}
			return nil, fmt.Errorf("lock request id %s: %w", path, err)
		}
		// The holder before us removes the file as it lets go: make sure
		// the lock we hold is on the file that is there now.
		var held, now unix.Stat_t
		if unix.Fstat(fd, &held) == nil && unix.Fstatat(dfd, name, &now, unix.AT_SYMLINK_NOFOLLOW) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return &RequestLock{agent: agent, id: id, path: path, metaDir: t.metaDir, name: name, f: f}, nil
		}
		f.Close()
	}
}

// File is the locked file: a child process that inherits it keeps the
// request id held until it exits too.
func (l *RequestLock) File() *os.File { return l.f }

// Release lets the request id go. Safe to call twice.
func (l *RequestLock) Release() {
	if l == nil || l.f == nil {
		return
	}
	if dfd, err := openPrivateDir(l.metaDir, requestDir, 0, false); err == nil {
		_ = unix.Unlinkat(dfd, l.name, 0)
		unix.Close(dfd)
	}
	l.f.Close()
	l.f = nil
}
