package journal

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/fencectl/fencectl/journal/record"
)

// The storage port: what package fence asks of a journal, whatever holds
// it. The bbolt store (package journal/bolt) is one implementation; a store
// that keeps the journal in etcd is meant to be another. The seams are cut
// for both:
//
//   - Update may run its function more than once (an optimistic store
//     retries it when a compare fails), each time in a fresh transaction,
//     so the function must set everything it reports on every run and
//     must not count on effects of an earlier, aborted run.
//   - fence assumes no process-wide lock: a store that serialises writers
//     says so (Store.Exclusive), and fence relies on "only the last commit
//     can be unfinished" only then.
//   - lease expiry is judged by the store's clock (Tx.Now).
//
// The contract every implementation meets is the test suite in package
// journal/journaltest.

// Backend makes handles on the journals of one kind of store. dir is the
// tree's meta directory (.fence).
type Backend interface {
	// Name names the kind of store ("bbolt", "etcd"), for status and show.
	Name() string
	// Exists reports whether dir holds a journal (of any content).
	Exists(dir string) (bool, error)
	// Path names the journal of dir in messages (a file, a URL).
	Path(dir string) string
	// Open opens the journal of dir. A missing journal is ErrNoJournal; an
	// unreadable one a *CorruptError; one of another schema a
	// *VersionError. A writer (o.ReadOnly false) holds the writer's turn
	// until Park or Close if the store serialises writers (Exclusive).
	Open(dir string, o OpenOptions) (Store, error)
	// Watch reports changes to the journal of dir, so that a lease holder
	// learns of a revoke without polling.
	Watch(dir string) (Watcher, error)
	// LockTree takes the tree-wide exclusive lock that init and recover
	// hold while they make or rebuild the journal of dir, waiting up to
	// timeout (then ErrBusy). Making, setting aside and salvaging a
	// journal go through the lock, so only its holder can do them.
	LockTree(dir string, timeout time.Duration) (TreeLock, error)
}

// TreeLock is the tree-wide lock, held: another LockTree of the tree waits
// until Release, so of several inits at once exactly one creates the
// journal. (The bbolt store's Open waits for it too.)
type TreeLock interface {
	// Open is Backend.Open for the lock's holder, who must not wait for
	// the lock it holds.
	Open(o OpenOptions) (Store, error)
	// Create makes a new, empty journal with the tree's defaults d and the
	// token counter at seed (LastToken is seed). It fails with fs.ErrExist
	// if a journal is there; what a create that crashed left is cleared.
	Create(d record.Defaults, seed uint64) error
	// SetAside moves the journal out of the way, never deleting it, so that
	// Create can make a new one; its tokens still count in Salvage. It
	// returns where the journal went, or "" if there was none.
	SetAside(now time.Time) (string, error)
	// Salvage reads what the journal, however damaged, and every journal
	// SetAside kept still show. It never fails: what cannot be read is
	// left out.
	Salvage() Salvaged
	// Release gives the lock up.
	Release() error
}

// Salvaged is what damaged journals still show; recover builds the new
// journal from it.
type Salvaged struct {
	// Token is the highest token the journal or a journal set aside can
	// have issued; TokenOK is false if none shows one.
	Token   uint64
	TokenOK bool
	// Defaults are the current journal's settings; DefaultsOK is false if
	// they cannot be read (nor are valid).
	Defaults   record.Defaults
	DefaultsOK bool
}

// OpenOptions say how to open a journal.
type OpenOptions struct {
	ReadOnly bool          // a reader: the shared lock, no writes
	Timeout  time.Duration // how long to wait for the writer's turn before ErrBusy
	// Clock is the local clock a store that has no clock of its own (bbolt)
	// answers Tx.Now with; nil is time.Now.
	Clock func() time.Time
	// OnUpgrade, if set, is called after a commit that raised the
	// journal's schema version to the newest (the first record that uses
	// what it adds: dependencies, labels): from then on an older fencectl
	// refuses the journal. A caller says so once.
	OnUpgrade func(from, to string)
}

// Store is one open journal.
type Store interface {
	// View runs fn in a read-only transaction that sees one committed state.
	// View too may run fn more than once, each time on a fresh state (etcd
	// runs it again when compaction took its snapshot away): fn must set
	// everything it reports on every run.
	View(fn func(Tx) error) error
	// Update runs fn in a write transaction: what fn writes commits
	// together, or nothing does when fn returns an error. Update may run fn
	// more than once, each time in a fresh transaction (see the port's
	// rules above).
	Update(fn func(Tx) error) error
	// Head identifies the last commit, by any process: two commits on one
	// tree never share a head. fence records the head whose file moves it
	// finished, to skip settling when nobody committed since.
	Head() (string, error)
	// Exclusive reports whether this handle holds the writer's turn alone:
	// every other writer of the journal waits until Park or Close. Then
	// only the last commit can have moves a crash left undone.
	Exclusive() bool
	// WritersHeld reports whether no writer of the journal can commit
	// while this handle is open and not parked: it holds the writer's turn
	// alone, or a reader's shared lock on a store that serialises writers.
	// Then nothing in the tree moves either, and a reader may list the
	// directories in any order beside its read of the journal.
	WritersHeld() bool
	// Park gives the writer's turn (or a reader's shared lock) up but
	// keeps the handle for Resume, so a process that comes back soon
	// skips opening the store afresh. A parked handle is used only after
	// Resume succeeds.
	Park() error
	// Resume takes the writer's turn (or the shared lock) back, waiting
	// up to timeout. A handle that another process's commits (or a new
	// journal file) made stale is opened again under the lock just taken.
	// On an error nothing is held, and the caller closes the handle.
	Resume(timeout time.Duration) error
	// Verify reads the whole journal and returns a *CorruptError for any
	// damage found.
	Verify() error
	// Close gives everything up. Safe on a parked handle.
	Close() error
}

// Tx is one journal transaction. Methods that change state may only be
// called inside Store.Update.
type Tx interface {
	// Now is the time as the store judges lease expiry: for this
	// transaction, the same on every call.
	Now() time.Time
	// Writes counts the calls that changed state, made or attempted. An
	// operation that fails with Writes unchanged left the transaction as
	// it found it (fence's group commit keeps the others' changes then).
	Writes() int
	// Confirm returns nil if nothing this transaction has read of tasks,
	// claims and indexes has changed since; otherwise it spoils the run
	// (Update runs the function again on a fresh snapshot) and says so.
	// A decision that rests on the file system as well as the journal (a
	// task file out of place) confirms first: where writers race (etcd)
	// the snapshot can be older than the directory it is compared with.
	// Where writers take turns (bbolt) nothing can have changed: nil.
	Confirm() error

	// Task returns the record of id; ok is false if the journal does not
	// know it.
	Task(id string) (task record.Task, ok bool, err error)
	// PutTask stores rec and keeps the indexes (ready: available tasks
	// that wait for nothing, in claim order; expiry; dependents; ready per
	// label), the per-state counts and the blocked count in step. old is the record it replaces (nil for a
	// new task).
	PutTask(old *record.Task, rec record.Task) error
	// ForEachTask calls fn for every record, in id order.
	ForEachTask(fn func(record.Task) error) error
	// TasksFrom calls fn for each record whose id sorts strictly after
	// after ("" : from the first), in id order, as Task returns it, until
	// fn returns false or an error. It reads only as far as fn goes (a
	// seek, then page by page), never every record: one page of a listing
	// costs the same whatever the journal holds.
	TasksFrom(after string, fn func(record.Task) (more bool, err error)) error
	// Counts returns how many tasks are in each state.
	Counts() map[record.State]int
	// Ready calls fn with the ids of available tasks in claim order
	// (highest priority, then oldest by Seq) until fn returns false. A
	// store whose writers race (etcd) may, in a run of Update made again
	// after a lost race, start from a random one of the first few ready
	// tasks of the top priority, so that the losers do not meet again on
	// one task; a first run always starts from the first.
	Ready(fn func(id string) (more bool))
	// Expired returns the ids of claimed tasks whose deadline is at or
	// before now, oldest deadline first (see FullSweeper for a store that
	// sweeps now and then).
	Expired(now time.Time) []string
	// Scheduled calls fn with the id and NotBefore of every waiting task
	// that waits for a time only (record.Task.Scheduled: the due index
	// PutTask keeps), earliest first, until fn returns false. It reads
	// only as far as fn goes, so promoting the due tasks costs O(due).
	Scheduled(fn func(id string, at time.Time) (more bool)) error
	// Leases calls fn for every claimed task's id in deadline order.
	Leases(fn func(id string) error) error
	// IndexSizes returns how many entries the ready and expiry indexes hold.
	IndexSizes() (ready, expiry int)
	// Blocked returns how many tasks are blocked (record.Task.Blocked:
	// waiting, or available in a journal written before the waiting
	// state, with a non-empty After), in O(1). They are not in the ready
	// index.
	Blocked() int
	// Dependents calls fn with the ids of the tasks whose After holds
	// dep (the reverse index PutTask keeps), until fn returns false. It
	// reads only dep's entries, never every task.
	Dependents(dep string, fn func(id string) (more bool)) error
	// Dependencies calls fn for every entry of that reverse index, by
	// dependency then dependent, until fn returns false (replay's check).
	Dependencies(fn func(dep, id string) (more bool)) error
	// ReadyLabel calls fn with the ids of ready tasks that carry label,
	// in claim order, until fn returns false: the per-label ready index
	// PutTask keeps. It reads only label's entries.
	ReadyLabel(label string, fn func(id string) (more bool))

	// Claim returns what the journal remembers of token.
	Claim(token uint64) (c record.Claim, ok bool, err error)
	// PutClaim stores c under its token.
	PutClaim(c record.Claim) error
	// ForEachClaim calls fn for every stored claim, in token order.
	ForEachClaim(fn func(record.Claim) error) error
	// Request returns the token of the current claim granted to request
	// id of agent, if any.
	Request(agent, id string) (uint64, bool)
	// PutRequest records that request id of agent was granted token.
	PutRequest(agent, id string, token uint64) error
	// DeleteRequest forgets request id of agent.
	DeleteRequest(agent, id string) error

	// NextToken issues a fencing token: above every token issued before,
	// at least now in microseconds, below the token ceiling.
	NextToken(now time.Time) (uint64, error)
	// LastToken returns the highest token ever issued (or the seed).
	LastToken() uint64
	// Ceiling returns the journal's copy of the token ceiling (0 if no
	// token was issued under one yet).
	Ceiling() uint64
	// RaiseCounter sets the token counter to at least v.
	RaiseCounter(v uint64) error
	// LostTokens reports whether this journal lost tokens it issued: its
	// counter is behind the witness the ceiling's files record
	// (witness.go), so it is an older copy put in its place, a backup
	// restored. Its leases are then those of the day of the copy, some
	// of them ended since, and fence ends them all before any step is
	// judged. It costs a stat of each file while they do not change.
	LostTokens() (bool, error)

	// Append adds ev to the log with the next sequence number and returns
	// it as stored.
	Append(ev record.Event) (record.Event, error)
	// LastCommit returns the events of the most recent write transaction
	// that appended any.
	LastCommit() ([]record.Event, error)
	// Events calls fn for each event from seq from on, in order, while fn
	// returns true.
	Events(from uint64, fn func(record.Event) (more bool, err error)) error
	// EventsBackward calls fn for each event from the newest back.
	EventsBackward(fn func(record.Event) (more bool, err error)) error
	// TaskEventsBackward calls fn for each event of task id from the
	// newest back, reading only that task's events.
	TaskEventsBackward(id string, fn func(record.Event) (more bool, err error)) error

	// Defaults returns the tree-wide settings chosen at init (or since
	// changed by PutDefaults).
	Defaults() (record.Defaults, error)
	// PutDefaults replaces the tree-wide settings (fencectl defaults).
	PutDefaults(d record.Defaults) error
	// Reset empties everything derived from the log (tasks, indexes,
	// claims, requests, counts) for replay to write afresh. Events, folded
	// records and the token counter are kept.
	Reset() error
	// Check runs the store's own consistency check.
	Check() []error

	// Compaction (fencectl compact): the history of a finished task is
	// folded into its final record, kept as the base that replay starts
	// the task from, and its events are dropped. Sequence numbers and
	// tokens are never reused: Append goes on after the highest seq ever
	// appended, and the token counter is not touched.

	// Fold keeps rec as the folded record of task rec.ID: the task as its
	// events up to seq upTo leave it (replaces an earlier fold). Replay
	// starts the task from rec and skips its events up to upTo, so
	// dropping them (DropEvents) may follow in later transactions.
	Fold(rec record.Task, upTo uint64) error
	// Folded calls fn for every folded record, in id order, until fn
	// returns false or an error.
	Folded(fn func(f FoldedRecord) (more bool, err error)) error
	// FoldedTask returns the folded record of id, if it has one.
	FoldedTask(id string) (rec record.Task, upTo uint64, ok bool, err error)
	// DropEvents removes up to limit (0: no limit) of task id's events
	// with seq at or below upTo, oldest first, and returns them, counting
	// them by kind into Dropped. The highest seq stays what it was: the
	// next Append gets a new one.
	DropEvents(id string, upTo uint64, limit int) ([]record.Event, error)
	// Dropped returns how many events of each kind DropEvents has ever
	// dropped (see EventKind): with the log, every event ever appended.
	Dropped() (map[EventKind]uint64, error)
	// DeleteClaim forgets the claim of token, a folded task's, but keeps
	// which task it was issued for (FoldedToken): an agent back with the
	// token and no task id is told how that task's lease ended, not that
	// the token was never issued.
	DeleteClaim(token uint64, task string) error
	// FoldedToken returns the task of a token whose claim DeleteClaim
	// forgot; ok is false for any other token.
	FoldedToken(token uint64) (task string, ok bool, err error)
}

// Reclaimer is a Store that can give the space of dropped records back
// (compact): bbolt never shrinks its file by itself, so its store
// rewrites it. The handle must hold the writer's turn (Exclusive); it
// stays usable, on the new file, and every other handle of the journal
// (parked ones at Resume; watchers) sees a new file.
type Reclaimer interface {
	Reclaim(o ReclaimOptions) (ReclaimResult, error)
}

// ReclaimOptions say how to reclaim.
type ReclaimOptions struct {
	// Crash is called at the named steps of the rewrite (test builds
	// exit there); nil: never.
	Crash func(point string)
}

// ReclaimResult is the journal's size before and after.
type ReclaimResult struct {
	Before, After int64
}

// Prefetcher is a Store that can read ahead, with the snapshot a write
// transaction begins with, what the operations of a group commit will read
// first: the records of the tasks they name (ids) and, when claims is
// true, of the first ready tasks. A store whose reads are local (bbolt)
// has no use for it; on etcd every read is a round trip, and a group of 16
// operations that each read their task in turn paid 16 of them.
// UpdateReading is Update otherwise; a failed read ahead is forgotten (the
// operations read for themselves).
type Prefetcher interface {
	UpdateReading(ids []string, claims bool, fn func(Tx) error) error
}

// CreateChecker is a TreeLock whose Create can be refused for what is
// already in the store (etcd: a prefix that shares keys with another
// tree's): CheckCreate says so before anything is written, so that a
// recover refused for it leaves the tree as it was.
type CreateChecker interface {
	CheckCreate() error
}

// ReadyHeads is a Tx that can list the first ready task of each priority,
// in claim order, without reading the rest of the ready index (bbolt: one
// seek per priority). Within a priority ready tasks are in the order they
// were added, so the oldest available task is one of these: a metrics
// scrape read every available record for it, 1.2 to 1.7 s at a million
// tasks, with every writer waiting (found from outside).
type ReadyHeads interface {
	ReadyHeads(fn func(id string) (more bool))
}

// FullSweeper is a Tx whose Expired may answer from a recent sweep: on
// etcd, finding expired leases reads every claim (and what etcd keeps of
// finished ones until it compacts), so a tree sweeps at most every couple
// of seconds, and a transaction in between finds nothing expired. SweepAll
// makes this transaction's Expired look at every lease: for a command
// that reaps on purpose.
type FullSweeper interface {
	SweepAll()
}

// Unblocker is a Tx of a store whose transactions are bounded (etcd
// takes --max-txn-ops operations, 128 by default): there a task that
// many others wait for cannot release them all in the commit that makes
// it done. fence releases a few there and notes the task; later commits
// release the rest and drop the note. The note makes that survive a
// crash between those commits: any writer that sweeps finds it. A store
// without the bound (bbolt) releases every dependent in the one commit
// and needs no note.
type Unblocker interface {
	// NoteUnblocking notes that dep is done and some of its dependents
	// still wait for it.
	NoteUnblocking(dep string) error
	// Unblocking calls fn with every noted task, until fn returns false.
	// Like FullSweeper's Expired, it may answer from a recent sweep
	// (nothing) unless SweepAll was called.
	Unblocking(fn func(dep string) (more bool)) error
	// DropUnblocking removes dep's note.
	DropUnblocking(dep string) error
	// NotedUnblocking reports whether this transaction noted a task.
	NotedUnblocking() bool
}

// Watcher is signalled (coalesced) after the journal changed; the receiver
// then re-reads what it cares about.
type Watcher interface {
	C() <-chan struct{}
	Close() error // safe to call twice
}

// FoldedRecord is a folded record as Tx.Folded hands it over, not decoded:
// replay compares a million of them with the stored records, and one that
// is byte for byte the stored record's encoding needs no decoding.
type FoldedRecord struct {
	ID   string
	UpTo uint64 // the seq of the last event the fold covers
	// Enc is the record, as EncodeTask wrote it. It is valid until the
	// transaction ends (a bbolt store hands out its own memory).
	Enc []byte
}

// ParseFolded reads a folded record as both stores keep it: the seq its
// fold covers (8 bytes, big-endian), then the record (EncodeTask). Enc
// shares v's memory.
func ParseFolded(id string, v []byte) (FoldedRecord, error) {
	if len(v) < 8 {
		return FoldedRecord{}, fmt.Errorf("decode folded task %q: %d bytes", id, len(v))
	}
	return FoldedRecord{ID: id, UpTo: binary.BigEndian.Uint64(v[:8]), Enc: v[8:]}, nil
}

// Task decodes the folded record.
func (f FoldedRecord) Task() (record.Task, error) {
	rec, err := DecodeTask(f.Enc)
	if err != nil {
		return rec, fmt.Errorf("decode folded task %q: %w", f.ID, err)
	}
	return rec, nil
}
