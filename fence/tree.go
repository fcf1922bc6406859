package fence

import (
	"golang.org/x/sys/unix"

	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// DefaultTimeout bounds the wait for the journal lock.
const DefaultTimeout = 10 * time.Second

// NoWait as Options.Timeout tries the lock once and reports busy at once:
// what `--timeout 0` asks for (0 itself is the zero Options: the default).
const NoWait time.Duration = -1

// DefaultTTL and DefaultMaxAttempts are what `init` uses when not told.
const (
	DefaultTTL         = 10 * time.Minute
	DefaultMaxAttempts = 3
)

// Options configure a Tree.
type Options struct {
	// Timeout bounds the wait for the lock; 0 means DefaultTimeout, and
	// NoWait (any negative value) tries once. A step's context does not
	// cut that wait short, but a step whose context has ended when its
	// turn comes is not made: it returns the context's error.
	Timeout time.Duration
	// Notify receives what a command noticed on the way but that is not its
	// result: inbox entries it could not adopt, files it had to put back.
	// nil drops them. It is called while a group of writes holds the
	// tree's lock (every other process's writer waits): it must return
	// quickly, must not panic, and must not call the Tree, whose writes
	// would wait for the group that called it, for good. Hand notices to
	// another goroutine to act on them.
	Notify func(Notice)
	// Backend is the store that holds the journal; nil is the one the
	// tree's .fence/journal.json names, else the bbolt store in
	// .fence/journal.db (see backend.go).
	Backend journal.Backend
	// Journal, for InitTree, asks for a journal in another store (etcd):
	// init records it in .fence/journal.json. Ignored when Backend is set.
	Journal *journal.Config
	// Clock is the time every rule reads (see clock.go); nil is the system
	// clock. A store with a clock of its own judges expiry by that instead.
	Clock func() time.Time
	// Boot is the boot clock of a tree whose journal is on this host
	// (bbolt): with it, the tree's clock is the lease clock (see
	// leaseclock.go), which the wall clock's jumps do not move. Nil is the
	// system's boot clock if Clock is nil too; with Clock set and Boot nil,
	// Clock alone is the tree's time (tests that move it by hand).
	Boot BootClock
	// AllowNetworkFS lets InitTree make a bbolt journal on a file system
	// other hosts may reach (NFS, SMB, FUSE…), which it refuses otherwise
	// (see netfs.go): for a tree that one host alone uses.
	AllowNetworkFS bool
}

// Notice is a side report: something found and handled, or left alone.
type Notice struct {
	Kind   NoticeKind `json:"notice"`
	Name   string     `json:"name"`
	Detail string     `json:"detail"`
}

// Tree is a task tree and its journal. It holds no lock while idle: every
// operation takes the lock, opens the journal, commits, moves files and
// lets go, so CLI agents and in-process users share a tree fairly.
type Tree struct {
	root    string
	metaDir string
	mirror  *fsmirror.Mirror
	opts    Options
	store   journal.Backend
	owned   bool // store was made for this Tree: Close closes it
	batch   *batcher
	// leaseClock is the tree's clock on bbolt (see leaseclock.go); nil
	// on etcd, or when the caller's Clock is the time.
	leaseClock *leaseClock
	// nextDue is when the earliest scheduled task comes due (Unix
	// nanoseconds; 0: none), as the last claim that found nothing to
	// claim read it from the due index: a waiting claim's timer (waitWake).
	nextDue *atomic.Int64
	// config is the journal config (.fence/journal.json) this Tree's store
	// was opened from, if any (see openedConfig).
	config *openedConfig
}

// NoJournalError says a tree has no journal, and what to do.
type NoJournalError struct{ Path string }

// ErrNoJournal is in the chain of every error that says the tree has no
// journal: a *NoJournalError from Open, or the error of a tree opened
// before its journal went (an etcd prefix wiped under it).
var ErrNoJournal = journal.ErrNoJournal

func (e *NoJournalError) Error() string {
	return fmt.Sprintf("no journal at %s: init makes a task tree; recover rebuilds a lost journal from the directories", e.Path)
}

func (e *NoJournalError) Unwrap() error { return journal.ErrNoJournal }

// RecoverUnfinishedError refuses to open a tree whose recover began and
// has not finished: its journal holds only part of the tasks (the
// rebuild goes in several commits) and the files are not in place.
type RecoverUnfinishedError struct {
	Root  string
	Since time.Time // when that recover began (its mark's time)
}

func (e *RecoverUnfinishedError) Error() string {
	return fmt.Sprintf("a recover of %s began at %s and has not finished (it is still running, or it was cut short): the journal does not hold every task yet; wait for it, or run `fencectl recover` to finish it; nothing changed", e.Root, e.Since.UTC().Format(time.RFC3339))
}

// refuseUnfinishedRecover is a *RecoverUnfinishedError while the tree at
// root (meta its .fence) has a recover that began and has not finished.
func refuseUnfinishedRecover(root, meta string) error {
	if fi, err := os.Lstat(filepath.Join(meta, recoveringName)); err == nil {
		return &RecoverUnfinishedError{Root: root, Since: fi.ModTime()}
	}
	return nil
}

func (t *Tree) refuseUnfinishedRecover() error {
	if err := refuseUnfinishedRecover(t.root, t.metaDir); err != nil {
		return err
	}
	return t.config.refuseMoved()
}

// Open opens the tree at root. It fails with a *NoJournalError, before
// touching anything, if root has no journal, and with a
// *RecoverUnfinishedError while a recover has not finished.
func Open(root string, o Options) (*Tree, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	meta := filepath.Join(abs, string(fsmirror.Meta))
	store, owned, err := o.backendFor(meta)
	if err != nil {
		return nil, err
	}
	if ok, err := store.Exists(meta); err != nil || !ok {
		if owned {
			closeBackend(store)
		}
		if err != nil {
			return nil, err
		}
		if err := insideTree(abs); err != nil {
			return nil, err
		}
		return nil, &NoJournalError{Path: store.Path(meta)}
	}
	if err := refuseUnfinishedRecover(abs, meta); err != nil {
		if owned {
			closeBackend(store)
		}
		return nil, err
	}
	m, err := fsmirror.Open(abs)
	if err != nil {
		if owned {
			closeBackend(store)
		}
		return nil, err
	}
	m.Crash, m.Fault, m.Trace = crashAt, renameFault, renameTrace
	foreign := foreignOwner(meta)
	var lc *leaseClock
	if store.Name() == "bbolt" && (o.Clock == nil || o.Boot != nil) {
		boot := o.Boot
		if boot == nil {
			boot = SystemBootClock
		}
		// Without a boot clock (no /proc), the wall clock judges leases.
		lc, _ = openLeaseClock(meta, o.clock(), boot, foreign == nil)
	}
	o.Timeout, o.Clock = o.lockTimeout(), o.clock()
	if lc != nil {
		o.Clock = lc.now
	}
	t := &Tree{root: abs, metaDir: meta, mirror: m, opts: o, store: store, owned: owned, batch: &batcher{writerSlot: &writerSlot{}}, leaseClock: lc, nextDue: new(atomic.Int64)}
	if owned && o.Journal == nil {
		t.config = newOpenedConfig(meta)
	}
	if warning := m.CheckPerms(); warning != "" {
		t.notify(NoticeWarning, abs, warning)
	}
	if store.Name() == "bbolt" && foreign == nil {
		t.keepPrivate(meta, store.Path(meta))
	}
	if lc != nil && lc.damaged != nil {
		t.notify(NoticeWarning, filepath.Join(meta, bootFileName), lc.damaged.Error()+": replaced; no lease is reaped as claimed before a reboot until the next reboot (one of an earlier boot, if any, ends at its TTL)")
	}
	t.warnNetworkFS()
	return t, nil
}

// keepPrivate puts .fence/ back to 0700 and the journal file to 0600 when
// another user may read them (a backup restored with another umask, a
// chmod by hand): the journal names every live token, and a token is all
// it takes to act on a task. It says so; one it cannot change (another
// owner's) it only reports. The mode is read and changed through one
// descriptor, opened without following a symlink: a check of the path
// and a chmod of the path would change whatever was put there between
// the two (found from outside, with root's chmod led to /etc).
func (t *Tree) keepPrivate(meta, journalPath string) {
	for _, f := range []struct {
		path  string
		mode  uint32
		flags int
	}{{meta, 0o700, unix.O_DIRECTORY}, {journalPath, 0o600, 0}} {
		fd, err := unix.Open(f.path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|f.flags, 0)
		if err != nil {
			continue // a symlink, or gone: Open's other checks say so
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o077 == 0 || !(st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Mode&unix.S_IFMT == unix.S_IFREG) {
			unix.Close(fd)
			continue
		}
		was := st.Mode & 0o777
		err = unix.Fchmod(fd, f.mode)
		unix.Close(fd)
		if err != nil {
			t.notify(NoticeWarning, f.path, fmt.Sprintf("other users may read it (mode %#o), and it names live tokens: %v; run chmod %o %s", was, err, f.mode, f.path))
			continue
		}
		t.notify(NoticeWarning, f.path, fmt.Sprintf("other users could read it (mode %#o), and it names live tokens: set to %#o", was, f.mode))
	}
}

// PermsWarning is what Open warns of the tree's permissions (a state
// directory others may write), or "": for a process that keeps the tree
// open and answers many commands, each of which must hear it.
func (t *Tree) PermsWarning() string { return t.mirror.CheckPerms() }

// CloseAtExit is Close for a process that exits right after: it leaves
// the journal mapped for the exit to undo. An unmap of a process that is
// still running costs a TLB shootdown on every CPU its threads ran on, a
// few percent of a CLI claim's CPU; at exit the kernel tears the mapping
// down with the rest. No lock is held either way (the journal handle is
// parked or closed after every write). Never use it in a process that goes
// on: the mapping and a file descriptor would leak.
func (t *Tree) CloseAtExit() error {
	if t.batch.writerSlot != nil {
		t.batch.live.close(t.metaDir) // its name, or it is left for a reaper to tidy
	}
	t.batch.idle.Store(nil)
	t.batch.readIdle.Store(nil)
	return t.mirror.Close()
}

// Close waits for the writes in flight, refuses new ones
// (ErrTreeClosed), and releases the tree's journal and directory
// handles. It must not be called from Options.Notify.
func (t *Tree) Close() error {
	t.batch.drain()
	if db := t.batch.takeIdle(); db != nil {
		db.Close()
	}
	if p := t.batch.readIdle.Swap(nil); p != nil {
		p.db.Close()
	}
	if t.batch.writerSlot != nil {
		t.batch.watch.close()
		t.batch.live.wake.close()
		t.batch.live.close(t.metaDir)
	}
	if t.owned {
		closeBackend(t.store)
	}
	return t.mirror.Close()
}

// Root returns the tree's absolute root.
func (t *Tree) Root() string { return t.root }

// Path returns where task id's file is while in state s, or "" for a state
// with no directory (see DirOf): a damaged record names no file.
func (t *Tree) Path(id string, s record.State) string {
	dir, err := DirOf(s)
	if err != nil {
		return ""
	}
	return t.mirror.Path(dir, id)
}

func (t *Tree) notify(kind NoticeKind, name, detail string) {
	if t.opts.Notify != nil {
		t.opts.Notify(Notice{Kind: kind, Name: name, Detail: detail})
	}
}

// OutputPath returns where output name of task id is written.
func (t *Tree) OutputPath(id, name string) string {
	return filepath.Join(t.root, string(fsmirror.Out), id, name)
}
