package journal

import (
	"errors"
	"fmt"
)

// ErrBusy means the lock on .fence/lock was not obtained within the timeout:
// another process holds the journal.
var ErrBusy = errors.New("journal busy: another fencectl process holds the lock")

// ErrNoJournal means the tree has no journal. Only `fencectl init` creates
// one, so that a typo in --dir never makes a new, empty tree by accident.
var ErrNoJournal = errors.New("no journal")

// CorruptError reports a journal file that cannot be read: truncated,
// overwritten, not a bbolt file, or of another schema version.
type CorruptError struct {
	Path   string
	Detail string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal %s is unreadable: %s", e.Path, e.Detail)
}

// VersionError reports a journal written by a different schema version.
type VersionError struct {
	Path      string
	Found     string
	Supported string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("journal %s has schema version %q; this fencectl reads version %q", e.Path, e.Found, e.Supported)
}
