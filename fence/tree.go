package fence

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
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
	// NoWait (any negative value) tries once.
	Timeout time.Duration
	// Notify receives what a command noticed on the way but that is not its
	// result: inbox entries it could not adopt, files it had to put back.
	// nil drops them.
	Notify func(Notice)
	// Backend is the store that holds the journal; nil is the bbolt store
	// in .fence/journal.db.
	Backend journal.Backend
	// Clock is the time every rule reads (see clock.go); nil is the system
	// clock. A store with a clock of its own judges expiry by that instead.
	Clock func() time.Time
}

// Notice is a side report: something found and handled, or left alone.
type Notice struct {
	Kind   string `json:"notice"` // adopted, inbox_rejected, inbox_duplicate, settled, missing_file
	Name   string `json:"name"`
	Detail string `json:"detail"`
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
	batch   *batcher
}

// NoJournalError says a tree has no journal, and what to do.
type NoJournalError struct{ Path string }

func (e *NoJournalError) Error() string {
	return fmt.Sprintf("no journal at %s: init makes a task tree; recover rebuilds a lost journal from the directories", e.Path)
}

func (e *NoJournalError) Unwrap() error { return journal.ErrNoJournal }

// Init creates the tree at root (and root itself if missing) and its
// journal. On an existing tree it checks the journal and changes nothing;
// created says which happened.
func Init(root string, d journal.Defaults) (created bool, err error) {
	res, err := InitTree(root, d, Options{})
	return res.Created, err
}

// InitResult says what InitTree found or made.
type InitResult struct {
	Root     string
	Created  bool             // false: the tree existed and nothing changed
	Defaults journal.Defaults // the tree's settings: d if created, else the existing ones
}

// InitTree is Init that also reports the tree's settings, which differ
// from d when the tree already existed (or another init won a race). It
// refuses, changing nothing, a directory that holds task files but no
// journal: an empty journal would hide them, and recover is the way back.
// The journal is made under the tree's lock, so of several inits at once
// exactly one creates it and the others report what it made. Of o, only
// Timeout (the wait for the lock) and Clock (the token counter starts
// above it) apply.
func InitTree(root string, d journal.Defaults, o Options) (InitResult, error) {
	res := InitResult{Defaults: d}
	timeout, clock := o.lockTimeout(), o.clock()
	if err := checkDefaults(d); err != nil {
		return res, err
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return res, err
	}
	res.Root = abs
	meta := filepath.Join(abs, string(fsmirror.Meta))
	exists, err := boltstore.Exists(meta)
	if err != nil {
		return res, err
	}
	if !exists {
		if err := refuseOrphanTasks(abs); err != nil {
			return res, err
		}
	}
	m, err := fsmirror.Create(abs)
	if err != nil {
		return res, err
	}
	defer m.Close()
	if exists { // an existing tree: a reader, under the shared lock
		res.Defaults, err = readDefaults(boltstore.Backend{}, meta, journal.OpenOptions{ReadOnly: true, Timeout: timeout, Clock: clock})
		return res, err
	}
	lock, err := boltstore.AcquireLock(filepath.Join(meta, boltstore.LockName), true, timeout)
	if err != nil {
		return res, err
	}
	defer lock.Release()
	if exists, err = boltstore.Exists(meta); err != nil {
		return res, err
	} else if exists { // another init won the race (we hold the lock: bbolt's alone)
		res.Defaults, err = readDefaults(lockHeld, meta, journal.OpenOptions{ReadOnly: true, Timeout: timeout, Clock: clock})
		return res, err
	}
	if err := refuseOrphanTasks(abs); err != nil {
		return res, err
	}
	boltstore.SweepCreating(meta)
	seed, err := tokenFloor(meta, clock())
	if err != nil {
		return res, err
	}
	if err := boltstore.CreateSeeded(meta, d, seed); err != nil {
		return res, err
	}
	res.Created = true
	return res, nil
}

// lockHeld opens a bbolt journal for init and recover, which hold
// .fence/lock already.
var lockHeld = boltstore.Backend{LockMode: boltstore.LockBoltOnly}

// readDefaults opens the journal in meta with o and reads the tree's
// settings.
func readDefaults(store journal.Backend, meta string, o journal.OpenOptions) (d journal.Defaults, err error) {
	db, err := store.Open(meta, o)
	if err != nil {
		return d, err
	}
	defer db.Close()
	err = db.View(func(tx journal.Tx) error {
		d, err = tx.Defaults()
		return err
	})
	return d, err
}

// Open opens the tree at root. It fails with a *NoJournalError, before
// touching anything, if root has no journal.
func Open(root string, o Options) (*Tree, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	meta := filepath.Join(abs, string(fsmirror.Meta))
	store := o.Backend
	if store == nil {
		store = boltstore.Backend{}
	}
	if ok, err := store.Exists(meta); err != nil {
		return nil, err
	} else if !ok {
		return nil, &NoJournalError{Path: store.Path(meta)}
	}
	m, err := fsmirror.Open(abs)
	if err != nil {
		return nil, err
	}
	m.Crash, m.Fault = crashAt, renameFault
	o.Timeout, o.Clock = o.lockTimeout(), o.clock()
	t := &Tree{root: abs, metaDir: meta, mirror: m, opts: o, store: store, batch: &batcher{writerSlot: &writerSlot{}}}
	if warning := m.CheckPerms(); warning != "" {
		t.notify("warning", abs, warning)
	}
	return t, nil
}

// CloseAtExit is Close for a process that exits right after: it leaves
// the journal mapped for the exit to undo. An unmap of a process that is
// still running costs a TLB shootdown on every CPU its threads ran on, a
// few percent of a CLI claim's CPU; at exit the kernel tears the mapping
// down with the rest. No lock is held either way (the journal handle is
// parked or closed after every write). Never use it in a process that goes
// on: the mapping and a file descriptor would leak.
func (t *Tree) CloseAtExit() error {
	t.batch.idle.Store(nil)
	return t.mirror.Close()
}

// Close releases the tree's directory handles.
func (t *Tree) Close() error {
	if db := t.batch.takeIdle(); db != nil {
		db.Close()
	}
	return t.mirror.Close()
}

// Root returns the tree's absolute root.
func (t *Tree) Root() string { return t.root }

// Path returns where task id's file is while in state s.
func (t *Tree) Path(id string, s State) string { return t.mirror.Path(DirOf(s), id) }

func (t *Tree) notify(kind, name, detail string) {
	if t.opts.Notify != nil {
		t.opts.Notify(Notice{Kind: kind, Name: name, Detail: detail})
	}
}

// errNoChange makes write roll its transaction back without an error: the
// call succeeded and there was nothing to record (an idempotent retry).
var errNoChange = errors.New("no change")

// write runs one writer operation: fn in a journal transaction, then the
// file moves of the events it committed. Concurrent callers on one Tree
// are committed in groups (batch.go): one lock, one commit and one set of
// directory fsyncs for all of them, each answered only once its change is
// durable. committed reports whether fn's change reached the disk, so a
// caller knows whether to clean up after a failure.
func (t *Tree) write(ctx context.Context, op string, fn func(tx journal.Tx, now time.Time) ([]journal.Event, error)) (evs []journal.Event, committed bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	p := &pendingOp{op: op, fn: fn, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	t.batch.submit(t, p)
	return p.evs, p.committed, p.err
}

// read runs fn in a read-only transaction under the shared lock.
func (t *Tree) read(ctx context.Context, fn func(tx journal.Tx, now time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	db, err := t.open(true)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx journal.Tx) error { return fn(tx, tx.Now()) })
}

// open opens the tree's journal: for reading (under the shared lock), or
// for writing, with the writer's turn.
func (t *Tree) open(readOnly bool) (journal.Store, error) {
	return t.store.Open(t.metaDir, journal.OpenOptions{ReadOnly: readOnly, Timeout: t.opts.Timeout, Clock: t.opts.Clock})
}

// commit appends ev, folds it into the task's record and the token's claim
// record, and stores both. prev is the record before (nil for add/adopt).
func commit(tx journal.Tx, prev *journal.Task, ev journal.Event) (journal.Task, journal.Event, error) {
	ev, err := tx.Append(ev)
	if err != nil {
		return journal.Task{}, ev, err
	}
	rec, err := Apply(prev, ev)
	if err != nil {
		return rec, ev, err
	}
	if err := tx.PutTask(prev, rec); err != nil {
		return rec, ev, err
	}
	if ev.Token != 0 {
		var prevClaim *journal.Claim
		if c, ok, err := tx.Claim(ev.Token); err != nil {
			return rec, ev, err
		} else if ok {
			prevClaim = &c
		}
		if c, ok := ApplyClaim(prevClaim, ev); ok {
			if err := tx.PutClaim(c); err != nil {
				return rec, ev, err
			}
			if err := trackRequest(tx, c); err != nil {
				return rec, ev, err
			}
		}
	}
	return rec, ev, nil
}

// trackRequest keeps the request index in step with a claim: a claim made
// for a request id is findable by (agent, request id) while it is current,
// and forgotten when it ends.
func trackRequest(tx journal.Tx, c journal.Claim) error {
	if c.RequestID == "" {
		return nil
	}
	if c.Ended != nil {
		return tx.DeleteRequest(c.Agent, c.RequestID)
	}
	return tx.PutRequest(c.Agent, c.RequestID, c.Token)
}

// withTimeout returns a view of the tree whose lock waits are bounded by
// d. It batches on its own, so its bound is never stretched by a group
// that another caller leads, but shares the tree's parked journal handle
// (it used to park one of its own, never closed: a mapping and two
// descriptors leaked per keeper heartbeat). The view needs no Close.
func (t *Tree) withTimeout(d time.Duration) *Tree {
	c := *t
	c.opts.Timeout = d
	c.batch = &batcher{writerSlot: t.batch.writerSlot}
	return &c
}

// OutputPath returns where output name of task id is written.
func (t *Tree) OutputPath(id, name string) string {
	return filepath.Join(t.root, string(fsmirror.Out), id, name)
}
