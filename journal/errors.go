package journal

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBusy means the writer's turn (for bbolt, the lock on .fence/lock) was
// not obtained within the timeout: another process holds the journal.
var ErrBusy = errors.New("journal busy: another fencectl process holds the lock")

// ErrNoJournal means the tree has no journal. Only `fencectl init` creates
// one, so that a typo in --dir never makes a new, empty tree by accident.
var ErrNoJournal = errors.New("no journal")

// CorruptError reports a journal that cannot be read: for bbolt, a file
// truncated, overwritten, or not a bbolt file. (A journal of another schema version
// is a *VersionError: readable, and never to be rebuilt.)
type CorruptError struct {
	Path   string
	Detail string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal %s is unreadable: %s", e.Path, e.Detail)
}

// VersionError reports a journal written with a schema version this
// fencectl does not read, most often by a newer fencectl. The journal is
// not damaged: it must never be rebuilt or set aside (that would free
// every lease and lose its history); the fix is the fencectl that wrote it.
type VersionError struct {
	Path      string
	Found     string
	Supported string
}

// Newer reports whether the journal's version is above the supported one.
func (e *VersionError) Newer() bool {
	found, err1 := strconv.Atoi(e.Found)
	supported, err2 := strconv.Atoi(e.Supported)
	return err1 == nil && err2 == nil && found > supported
}

func (e *VersionError) Error() string {
	who := "a fencectl of another version"
	if e.Newer() {
		who = "a newer fencectl"
	}
	return fmt.Sprintf("journal %s has schema version %s, written by %s; this fencectl reads schema versions up to %s. The journal is not damaged: nothing was changed; use the fencectl that wrote it (or a newer one), and do not run `fencectl recover` on it", e.Path, quoteVersion(e.Found), who, e.Supported)
}

// quoteVersion shows a version as stored, quoted only if it is not a plain
// number (a damaged or hostile value must not garble the message).
func quoteVersion(v string) string {
	if _, err := strconv.ParseUint(v, 10, 32); err == nil {
		return v
	}
	return strconv.Quote(v)
}

// ErrFull means the store refused a write for want of space (etcd's
// space quota): nothing was changed, and the same step may go through
// once space is made.
var ErrFull = errors.New("the journal's store is out of space")

// ErrTooLarge means one transaction holds more than the store takes at
// once (etcd's --max-txn-ops and --max-request-bytes): a group of
// operations is split and tried again in parts.
var ErrTooLarge = errors.New("transaction too large for the journal store")

// UnreachableError says a networked store (etcd) did not answer in time.
// It is ErrBusy to its callers (exit 5): the command changed nothing and
// may be run again.
type UnreachableError struct {
	Store     string
	Endpoints []string
	Err       error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("%s at %s did not answer: %v (check that %s runs and is reachable from this host, or raise --timeout); a change cut off while committing may have landed: running the same command again, with the same --token or --request-id, is safe", e.Store, strings.Join(e.Endpoints, ","), e.Err, e.Store)
}

// Is makes an UnreachableError match ErrBusy.
func (e *UnreachableError) Is(target error) bool { return target == ErrBusy }
func (e *UnreachableError) Unwrap() error        { return e.Err }

// PrefixOverlapError refuses to create an etcd journal whose prefix lies
// inside another tree's prefix, or holds another tree's keys: their key
// ranges would meet (a recover of the outer tree deletes the inner one's
// tasks as its own).
type PrefixOverlapError struct {
	Prefix string // the journal to create
	Other  string // the other tree's prefix, or a key found under Prefix
}

func (e *PrefixOverlapError) Error() string {
	return fmt.Sprintf("etcd prefix %s overlaps another task tree's keys (%s): a tree's prefix must neither lie inside another tree's prefix nor contain one", e.Prefix, e.Other)
}

// TLSFileError says a TLS file named for an etcd journal cannot be used.
// Source says who named it: one of init's flags, an environment variable
// (FENCE_ETCD_CACERT, ...), which wins over the config, or the tree's
// config (.fence/journal.json), so that the message points at what to
// fix. Path is "" when the file is missing from a pair (a certificate
// without its key).
type TLSFileError struct {
	What   string // "CA certificate", "client certificate", "client key"
	Path   string
	Source string // the flag or variable, or "" for the tree's config
	Err    error
}

// FromInput reports whether a flag or variable named the file: bad
// input, not a tree's damage.
func (e *TLSFileError) FromInput() bool { return e.Source != "" }

func (e *TLSFileError) Error() string {
	what := "etcd " + e.What
	if e.Path != "" {
		what += " " + e.Path
	}
	switch {
	case strings.HasPrefix(e.Source, "--"):
		return fmt.Sprintf("%s (from %s): %v", what, e.Source, e.Err)
	case e.Source != "":
		return fmt.Sprintf("%s (from %s, which wins over the tree's config): %v; fix or unset %s", what, e.Source, e.Err, e.Source)
	}
	return fmt.Sprintf("%s (recorded in the tree's .fence/journal.json): %v; put the file back, or name another with %s", what, e.Err, tlsVariable[e.What])
}

func (e *TLSFileError) Unwrap() error { return e.Err }

// tlsVariable is the variable that names each TLS file.
var tlsVariable = map[string]string{"CA certificate": "FENCE_ETCD_CACERT", "client certificate": "FENCE_ETCD_CERT", "client key": "FENCE_ETCD_KEY"}

// UnsyncedError says a commit is in the journal, where every reader now
// sees it, but the sync that was to make it durable failed (EIO, ENOSPC,
// EDQUOT on fdatasync): bbolt writes its meta page, then syncs it, so a
// failed sync leaves the commit in the page cache. The change happened,
// and its caller must hear that: taken for a failure, a claim would be
// held by a token nobody has, and an add's or a result's content thrown
// away while the journal has them. A power cut may still take it back.
type UnsyncedError struct {
	Path string
	Err  error
}

func (e *UnsyncedError) Error() string {
	return fmt.Sprintf("the journal %s could not be synced (%v): the change is in it, but a power cut may take it back; the disk may be failing or full", e.Path, e.Err)
}

func (e *UnsyncedError) Unwrap() error { return e.Err }
