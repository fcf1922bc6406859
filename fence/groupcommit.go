package fence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// The write path, with group commit.
//
// Every writer operation runs as fn in a journal transaction (write); its
// events are folded into the records (commit); the file moves follow the
// commit (settle.go). A process that serves many agents (the library with many goroutines)
// would otherwise pay, per operation, a lock, a journal commit and two
// directory fsyncs. Instead the first caller to arrive becomes the leader:
// it takes the lock once, runs every queued operation in one transaction,
// commits once, renames all files and fsyncs each directory once, then
// answers everyone. Callers that arrive meanwhile queue for the next
// group. Nobody is answered before their change is durable.

// errNoChange makes write roll its transaction back without an error: the
// call succeeded and there was nothing to record (an idempotent retry).
var errNoChange = errors.New("no change")

// write runs one writer operation: fn in a journal transaction, then the
// file moves of the events it committed. Concurrent callers on one Tree
// are committed in groups (below): one lock, one commit and one set of
// directory fsyncs for all of them, each answered only once its change is
// durable. committed reports whether fn's change reached the disk, so a
// caller knows whether to clean up after a failure.
func (t *Tree) write(ctx context.Context, op string, fn func(tx journal.Tx, now time.Time) ([]record.Event, error)) (evs []record.Event, committed bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return t.writeFor(ctx, op, nil, fn)
}

// writeAdopting is write for a claim that may take a task still in
// inbox/: its group adopts inbox/ before it runs, not after (see
// runGroup).
func (t *Tree) writeAdopting(ctx context.Context, op string, fn func(tx journal.Tx, now time.Time) ([]record.Event, error)) (evs []record.Event, committed bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return t.submit(ctx, &pendingOp{op: op, fn: fn, adoptFirst: true})
}

// groupReads returns what a group's operations will read first: the
// tasks they name, and whether any claims the next ready task.
func groupReads(ops []*pendingOp) (ids []string, claims bool) {
	for _, p := range ops {
		ids = append(ids, p.ids...)
		claims = claims || p.op == "claim" && len(p.ids) == 0
	}
	return ids, claims
}

// writeFor is write for an operation on the tasks ids: a store that reads
// over the network reads them ahead for the whole group in one round trip
// (journal.Prefetcher).
func (t *Tree) writeFor(ctx context.Context, op string, ids []string, fn func(tx journal.Tx, now time.Time) ([]record.Event, error)) (evs []record.Event, committed bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return t.submit(ctx, &pendingOp{op: op, ids: ids, fn: fn})
}

// submit queues p and waits for its outcome.
func (t *Tree) submit(ctx context.Context, p *pendingOp) (evs []record.Event, committed bool, err error) {
	if err := t.refuseForeign(); err != nil {
		return nil, false, err
	}
	p.done, p.lead = make(chan struct{}), make(chan struct{}, 1)
	p.ticket, _ = ctx.Value(ticketKey{}).(*groupTicket)
	// A step whose context ended while it waited (a library caller's
	// deadline, a daemon's client gone) is not made: its caller has been
	// told, or will be, that it was not.
	gone, _ := ctx.Value(callerKey{}).(func() bool)
	p.gone = func() error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: the step waited for its turn until its context ended, and was not made; nothing was made", err)
		}
		if gone != nil && gone() {
			return errCallerGone
		}
		return nil
	}
	t.batch.submit(t, p)
	return p.evs, p.committed, p.err
}

// read runs fn in a read-only transaction under the shared lock.
func (t *Tree) read(ctx context.Context, fn func(tx journal.Tx, now time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	db, err := t.openReader()
	if err != nil {
		return err
	}
	// An error of fn's own (a stale token, no such task) says nothing
	// about the handle; one from the store (a damaged page) does.
	fnFailed := false
	err = db.View(func(tx journal.Tx) error {
		err := fn(tx, tx.Now())
		fnFailed = err != nil
		return err
	})
	_, corrupt := errors.AsType[*journal.CorruptError](err)
	t.parkReader(db, err == nil || fnFailed && !corrupt)
	return err
}

// openReader returns the journal under the shared lock: the parked handle
// of the last read (reopened in place if the file changed under it), else
// a fresh one. A lease keeper reads whenever the journal changes, at most
// every watchSpacing; with eight run --loop processes on one tree that was
// a few hundred opens a second per process, each mapping the file anew.
func (t *Tree) openReader() (journal.Store, error) { return t.resumeOrOpen(&t.batch.readIdle, true) }

// parkReader ends a read's use of db (see park).
func (t *Tree) parkReader(db journal.Store, healthy bool) { park(&t.batch.readIdle, db, healthy) }

// openWriter returns the journal, locked for writing: the parked handle of
// the previous group (reopened in place if another process committed
// since), else a fresh one.
func (t *Tree) openWriter() (journal.Store, error) { return t.resumeOrOpen(&t.batch.idle, false) }

// parkWriter ends a group's use of db (see park).
func (t *Tree) parkWriter(db journal.Store, healthy bool) { park(&t.batch.idle, db, healthy) }

// resumeOrOpen takes the handle parked in slot back (see
// journal.Store.Resume), or opens the journal if none is parked.
func (t *Tree) resumeOrOpen(slot *atomic.Pointer[parked], readOnly bool) (journal.Store, error) {
	// A recover begun since this tree was opened (a long-lived process:
	// run --loop, mcp, serve) and not finished leaves a journal that holds
	// only part of the tasks: refused, as Open refuses it.
	if err := t.refuseUnfinishedRecover(); err != nil {
		return nil, err
	}
	if p := slot.Swap(nil); p != nil {
		if err := p.db.Resume(t.opts.Timeout); err != nil {
			p.db.Close()
			return nil, err
		}
		return p.db, nil
	}
	return t.open(readOnly)
}

// park ends a use of db: parked in slot for the next use if it went
// through, closed otherwise (after a failure nothing about the handle is
// trusted) or when the store cannot park it (bbolt's polling lock is the
// only lock, or a reader on a read-only tree holds none).
func park(slot *atomic.Pointer[parked], db journal.Store, healthy bool) {
	if healthy && db.Park() == nil {
		if old := slot.Swap(&parked{db}); old != nil {
			old.db.Close()
		}
		return
	}
	db.Close()
}

// open opens the tree's journal: for reading (under the shared lock), or
// for writing, with the writer's turn.
func (t *Tree) open(readOnly bool) (journal.Store, error) {
	if !readOnly {
		if err := t.refuseForeign(); err != nil {
			return nil, err
		}
	}
	return t.store.Open(t.metaDir, journal.OpenOptions{ReadOnly: readOnly, Timeout: t.opts.Timeout, Clock: t.opts.Clock, OnUpgrade: t.upgraded})
}

// upgraded says once that a commit raised the journal's schema version.
func (t *Tree) upgraded(from, to string) {
	t.notify(NoticeUpgraded, t.store.Path(t.metaDir), fmt.Sprintf("journal upgraded in place from schema version %s to %s (a task uses dependencies, labels, a schedule or a backoff); a fencectl older than this one now refuses the tree", from, to))
}

// commit appends ev, folds it into the task's record and the token's claim
// record, and stores both. prev is the record before (nil for add/adopt).
// An event that makes a task done also records a dep_done for each task
// waiting for it (commitMore returns those events, whose moves follow).
func commit(tx journal.Tx, prev *record.Task, ev record.Event) (record.Task, record.Event, error) {
	rec, ev, _, err := commitMore(tx, prev, ev, unblockInline)
	return rec, ev, err
}

// commitMore is commit, returning the dep_done events it recorded too;
// on a bounded store it releases inline dependents (unblockDependents).
func commitMore(tx journal.Tx, prev *record.Task, ev record.Event, inline int) (rec record.Task, _ record.Event, more []record.Event, err error) {
	rec, ev, err = commitOne(tx, prev, ev)
	if err == nil && Unblocks(prev, ev) {
		more, err = unblockDependents(tx, rec.ID, ev.Time, inline)
	}
	return rec, ev, more, err
}

// commitOne is commit without the dependents.
func commitOne(tx journal.Tx, prev *record.Task, ev record.Event) (record.Task, record.Event, error) {
	ev, err := tx.Append(ev)
	if err != nil {
		return record.Task{}, ev, err
	}
	rec, err := Apply(prev, ev)
	if err != nil {
		return rec, ev, err
	}
	if err := tx.PutTask(prev, rec); err != nil {
		return rec, ev, err
	}
	if ev.Token != 0 {
		var prevClaim *record.Claim
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
func trackRequest(tx journal.Tx, c record.Claim) error {
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

// pendingOp is one queued writer operation and, once done, its outcome.
// fn may be run more than once (see commitGroup), each time in a fresh
// transaction: it must set everything it reports on every run.
type pendingOp struct {
	op        string
	ids       []string // the tasks it names, if any (read ahead: writeFor)
	fn        func(tx journal.Tx, now time.Time) ([]record.Event, error)
	evs       []record.Event
	committed bool
	err       error
	// adoptFirst asks for inbox/ to be adopted before the group runs: a
	// claim that may take what was just dropped there (see claimWrite).
	adoptFirst bool
	done       chan struct{} // closed when the operation is finished
	lead       chan struct{} // a value asks the waiting caller to lead the next group
	ticket     *groupTicket  // the call of Together this operation belongs to, if any
	gone       func() error  // why its caller has gone (its context ended, WithCaller), or nil
}

// batcher queues writer operations of one Tree.
type batcher struct {
	mu      sync.Mutex
	queue   []*pendingOp
	leading bool
	// closed: Close has begun; new writes are refused (ErrTreeClosed),
	// and Close waits for the group in flight (leading) to finish.
	closed bool
	// held counts the HoldWrites in force: no group starts meanwhile.
	held int
	// awaited counts the calls of Together that have neither queued a
	// write nor returned: a leader waits for them (on arrived).
	awaited int
	arrived *sync.Cond
	// unreconciled holds the events of each commit of the running group
	// on a store whose writers do not take turns, for reconcileCommitted.
	// Only the group's leader touches it.
	unreconciled [][]record.Event
	// unblocking says a commit of the running group completed a task
	// with more dependents than it released (see unblockDependents).
	// Only the group's leader touches it.
	unblocking bool
	// lean says the operation being committed is run again because it
	// was too large: it releases no dependents beside it, and a claim
	// reports as its own the leases catchUp reaped for it (caughtUp)
	// (commitAlone). Only the group's leader touches them.
	lean     bool
	caughtUp []Reaped
	// holders is the liveness scan of the transaction being run (see
	// holderScan).
	holders holderScan
	*writerSlot
}

// writerSlot is what every view of a Tree (withTimeout) shares, so that a
// view made per heartbeat parks no handle of its own: one parked writer
// and one parked reader (a mapping and a descriptor each) per Tree,
// however long it runs.
type writerSlot struct {
	// finishedMu guards finished: the tasks whose files finishMove moved
	// inside a transaction's function, by that transaction's snapshot
	// (see finishMove); the group settles them again once it is done.
	finishedMu sync.Mutex
	finished   []string
	// shared says the journal's writers do not take turns (etcd): set by
	// beginWrite, for the claim's per-task crash finish (nextClaimable).
	shared atomic.Bool
	// idle is the journal handle of the last group, parked (see
	// journal.Store.Park) for the next group to resume; nil if none.
	idle atomic.Pointer[parked]
	// readIdle is the read-only handle of the last read, parked for the
	// next read (see openReader); nil if none.
	readIdle atomic.Pointer[parked]
	// fit is what the tree learned of how much one commit may carry.
	fit fitting
	// settled is the head (journal.Store.Head) of the last commit whose moves
	// this Tree finished itself; while it is still the head, settling can
	// be skipped.
	settled atomic.Pointer[string]
	// watch is the journal watch the Tree's keepers share (keeperwatch.go).
	watch sharedWatch
	// live is the anchor of the liveness files of the Tree's claims
	// (liveness.go).
	live liveAnchor
	// moving holds, while a group's function runs, where each task that an
	// earlier operation of the group changed has its file until the
	// group's moves (see groupPlace). Only the group's leader touches it.
	moving map[string]groupPlace
}

// groupPlace is where a task's file is while its group's transaction
// runs: the directory the journal had it in before the group, or, for a
// task the group added or adopted, a staged file that the group's moves
// will place.
type groupPlace struct {
	dir    fsmirror.Dir
	staged bool
}

// noteMoving records where the files of evs' tasks are until the group's
// moves: the first event of a task in the group says (its From, or its
// staged file).
func (s *writerSlot) noteMoving(evs []record.Event) {
	for _, ev := range evs {
		if _, seen := s.moving[ev.Task]; seen {
			continue
		}
		if s.moving == nil {
			s.moving = map[string]groupPlace{}
		}
		switch {
		case ev.Staged != "" && (ev.Type == record.EvAdd || ev.Type == record.EvAdopt):
			s.moving[ev.Task] = groupPlace{staged: true}
		case ev.Type == record.EvAdd || ev.Type == record.EvAdopt:
			s.moving[ev.Task] = groupPlace{dir: fsmirror.Dir(ev.Source)}
		default:
			if d, err := DirOf(ev.From); err == nil {
				s.moving[ev.Task] = groupPlace{dir: d}
			}
		}
	}
}

// parked holds a parked journal handle (an interface value cannot be
// swapped atomically by itself).
type parked struct{ db journal.Store }

// takeIdle takes the parked handle, if any, out of the slot.
func (s *writerSlot) takeIdle() journal.Store {
	if p := s.idle.Swap(nil); p != nil {
		return p.db
	}
	return nil
}

// mirrored records that every move up to the commit head is done: in this
// process, and in the mark for the next process (see fsmirror.MarkName).
func (t *Tree) mirrored(head string) {
	t.batch.settled.Store(&head)
	t.mirror.WriteMark(head)
}

// isMirrored reports whether the moves of commit head are known to be done.
func (t *Tree) isMirrored(head string) bool {
	if p := t.batch.settled.Load(); p != nil && *p == head {
		return true
	}
	return t.mirror.ReadMark() == head
}

// submit queues p and returns when p is done. The first caller to find no
// leader leads: it takes the whole queue as one group and runs it. Callers
// that arrive meanwhile wait in the queue; when the group is done, the
// leader hands the lead to the first of them and returns, so that its own
// caller can queue its next operation for the next group instead of
// running groups for everyone else until the queue happens to be empty.
func (b *batcher) submit(t *Tree, p *pendingOp) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		p.err = ErrTreeClosed
		return
	}
	b.queue = append(b.queue, p)
	if p.ticket != nil && p.ticket.b == b {
		b.punchLocked(p.ticket)
	}
	for {
		if b.leading {
			b.mu.Unlock()
			select {
			case <-p.done:
				return
			case <-p.lead:
			}
			b.mu.Lock()
		}
		select {
		case <-p.done:
			// Run by a group another caller led while this one waited
			// out a HoldWrites: nothing left to lead.
			b.mu.Unlock()
			return
		default:
		}
		b.leading = true
		if b.held == 0 {
			break
		}
		// Held (HoldWrites): no group starts until it is let go. The
		// queue, this caller's write in it, waits for the next leader.
		b.leading = false
		b.cond().Broadcast()
		for b.held > 0 {
			b.cond().Wait()
		}
	}
	for b.awaited > 0 {
		b.cond().Wait()
	}
	b.mu.Unlock()
	// The callers of the last group have just been answered and most will
	// queue their next operation within microseconds: yield until the queue
	// stops growing (a few times at most) so that they make this group.
	// Alone, one yield finds nothing new and costs about a microsecond.
	// (16 goroutines without the hand-off and the yields: groups of 15 and
	// 1 in turn; with one yield, a third of the groups had 2 to 4 members.)
	for i, n := 0, -1; i < 8; i++ {
		runtime.Gosched()
		b.mu.Lock()
		m := len(b.queue)
		b.mu.Unlock()
		if m == n {
			break
		}
		n = m
	}
	b.mu.Lock()
	group := b.queue
	b.queue = nil
	b.mu.Unlock()
	t.runGroup(group)
	b.mu.Lock()
	if len(b.queue) > 0 {
		b.queue[0].lead <- struct{}{}
	} else {
		b.leading = false
		b.cond().Broadcast() // a Close waits for this
	}
	b.mu.Unlock()
}

// HoldWrites waits for the group of writes in flight, if any, and starts
// no other until the returned function is called: a process about to be
// stopped (run on Ctrl-Z) does not stop holding the tree's lock, which
// kept every other agent of the tree out until fg (found from outside).
// Writes asked meanwhile wait; reads go on.
func (t *Tree) HoldWrites() (release func()) {
	b := t.batch
	b.mu.Lock()
	b.held++
	for b.leading {
		b.cond().Wait()
	}
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.held--
			b.cond().Broadcast()
			b.mu.Unlock()
		})
	}
}

// ErrTreeClosed is a write asked of a Tree after Close began.
var ErrTreeClosed = errors.New("the tree was closed: nothing was done (open it again)")

// drain refuses new writes and waits for the writes in flight: a group
// past its lock would otherwise commit and then move files through
// descriptors Close had closed, leaving claims held by tokens nobody got
// (found from outside).
func (b *batcher) drain() {
	b.mu.Lock()
	b.closed = true
	for b.leading || len(b.queue) > 0 {
		b.cond().Wait()
	}
	b.mu.Unlock()
}

// GroupCall is one call of Together: Fn is run with Ctx, marked so that
// its first write joins the group.
type GroupCall struct {
	Ctx context.Context
	Fn  func(ctx context.Context)
}

// groupTicket marks the context of one call of Together.
type groupTicket struct {
	b      *batcher      // the Tree's whose Together made it: a write to another Tree is no part of the group
	used   bool          // its write was queued, or it returned (guarded by b.mu)
	queued chan struct{} // closed then
}

type ticketKey struct{}

// Together runs calls side by side and commits their first writes (one
// Tree operation each) in one group, in the order of calls: one lock,
// one journal commit and one fsync per directory for all of them. Each
// call starts once the one before has queued its write (or returned),
// and the group's leader waits until every call has queued its write or
// returned, instead of committing what has arrived so far. It returns
// when every call has returned.
//
// For a caller with operations that need not wait for each other's
// outcome: `run --loop` completes one task and claims the next in one
// commit (the claim comes second, so a task the completion unblocks is
// claimable to it). A call that fails before writing fails alone, as in
// any group. A call must not wait, before its write, for another write
// of this Tree to finish: the group waits for it. A write a call makes to
// another Tree (another tree, or another Tree of this one) is no part of
// the group: it commits on its own, and the call's first write to this
// Tree (or its return) is what the group waits for.
func (t *Tree) Together(calls ...GroupCall) {
	b := t.batch
	b.mu.Lock()
	b.awaited += len(calls)
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range calls {
		tk := &groupTicket{b: b, queued: make(chan struct{})}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				b.mu.Lock()
				b.punchLocked(tk)
				b.mu.Unlock()
			}()
			c.Fn(context.WithValue(c.Ctx, ticketKey{}, tk))
		}()
		<-tk.queued
	}
	wg.Wait()
}

// punchLocked records that tk's call queued its write or returned.
func (b *batcher) punchLocked(tk *groupTicket) {
	if tk.used {
		return
	}
	tk.used = true
	close(tk.queued)
	b.awaited--
	b.cond().Broadcast()
}

// cond returns the condition a leader waits on for awaited calls; b.mu
// is held.
func (b *batcher) cond() *sync.Cond {
	if b.arrived == nil {
		b.arrived = sync.NewCond(&b.mu)
	}
	return b.arrived
}

// sweepStaging moves staged files whose writer died before its commit to
// .fence/quarantine, and says so, and finishes or undoes adoptions that a
// crash interrupted. It runs under the lock, after settle has published
// what the last commit staged.
func (t *Tree) sweepStaging(db journal.Store) {
	moved, adopting, err := t.mirror.Sweep(false)
	for _, name := range moved {
		t.notify(NoticeQuarantined, name, "staged by a process that died before its commit; moved to .fence/quarantine")
	}
	if err != nil {
		t.notify(NoticeWarning, string(fsmirror.Staging), err.Error())
	}
	t.restoreAdoptions(db, adopting)
}

// errTrySolo rolls a group's transaction back because one of its
// operations failed after writing: the others are run again without it,
// then it runs alone (see commitGroup).
var errTrySolo = errors.New("rerun the failing operation alone")

// errRolledBack rolls back the transaction of an operation that runs
// alone and failed after writing; its own error is in its pendingOp.
var errRolledBack = errors.New("operation failed; its writes are rolled back")

// errNothingWritten rolls back a group none of whose operations wrote
// anything (every one refused, or an idempotent retry): a refusal must
// change nothing, not even by committing an empty transaction, which
// would sync the journal twice and move its head.
var errNothingWritten = errors.New("no operation wrote; nothing to commit")

// beginWrite is what every writer does first, under the lock: notice
// replaced directories, finish the last commit, sweep the staging
// directory (which puts back what an interrupted adoption staged), and,
// with adopt, adopt the inbox. Only a failure of the journal stops it; a
// problem with one task's file is a notice, never a reason to stop every
// writer.
func (t *Tree) beginWrite(db journal.Store, adopt bool) error {
	// A long-lived Tree must act on the directories that are there now,
	// not on ones an operator moved away since it opened them.
	replaced, err := t.mirror.Refresh()
	if err != nil {
		return err
	}
	for _, d := range replaced {
		t.notify(NoticeReopened, string(d), string(d)+"/ was replaced since this process opened it; using the new one")
	}
	// Before anything is written: a move across mounts would fail after
	// its commit (fsmirror/mounts.go).
	if err := t.mirror.SplitMount(); err != nil {
		return err
	}
	t.batch.shared.Store(!db.Exclusive())
	if !db.Exclusive() {
		// Writers on several hosts commit side by side: any commit may have
		// moves a crash left undone, so there is no "last commit" to
		// settle. Each task's file is put where the journal says when a
		// writer touches the task (reconcile), and replay does the whole
		// tree. Staged files are swept by replay too: a file staged by a
		// live writer on another host looks just like an orphan here.
		if adopt {
			t.adoptInbox(db)
		}
		return nil
	}
	// Every writer runs on this host: a long-lived process knows inbox/
	// and .fence/tmp are still empty without reading them (fsmirror's
	// quiet.go).
	t.mirror.WatchQuiet()
	if err := t.settle(db); err != nil {
		return err
	}
	if err := t.sweepRebooted(db); err != nil {
		return err
	}
	t.sweepStaging(db)
	if adopt {
		t.adoptInbox(db)
	}
	return nil
}

// runGroup runs a group of operations: one lock, settle and adoption, one
// transaction, one commit, then the moves with one fsync per directory.
//
// Where writers do not take turns (etcd), the callers are answered as
// soon as their changes are durable and their files moved: the checks
// left after that (reconcileCommitted, settleFinished) change no caller's
// outcome, and the next group waits for them (its leader is named when
// this one returns) but the callers need not. They used to wait for
// reconcile's read of the head, a round trip per group: 16 goroutines on
// one etcd member made 6% more claims a second without it. (On bbolt
// nothing is left but parking the handle, and the callers wait for it as
// before.)
func (t *Tree) runGroup(group []*pendingOp) {
	answered := false
	answer := func() {
		if !answered {
			answered = true
			for _, p := range group {
				close(p.done)
			}
		}
	}
	defer answer()
	fail := func(ops []*pendingOp, err error) {
		for _, p := range ops {
			p.err, p.evs, p.committed = err, nil, false
		}
	}
	db, err := t.openWriter()
	if err != nil {
		fail(group, err)
		return
	}
	healthy := false
	defer func() { t.parkWriter(db, healthy) }()
	adoptFirst := slices.ContainsFunc(group, func(p *pendingOp) bool { return p.adoptFirst })
	if err := t.beginWrite(db, adoptFirst); err != nil {
		fail(group, err)
		return
	}
	// Under the lock, the last moment before anything is made: a step
	// whose caller has gone meanwhile (a daemon's client that gave up
	// while the step waited, the daemon stopped) is not made, rather
	// than made for nobody: a claim whose token nobody gets.
	live := slices.DeleteFunc(slices.Clone(group), func(p *pendingOp) bool {
		if p.gone == nil {
			return false
		}
		if err := p.gone(); err != nil {
			p.err = err
			return true
		}
		return false
	})
	err = t.commitAll(db, live)
	if err == nil {
		t.finishUnblocking(db)
	}
	if err == nil && !adoptFirst && slices.ContainsFunc(live, func(p *pendingOp) bool { return p.committed && len(p.evs) > 0 }) {
		// Adopting is a change of the tree's own: a group that changed
		// nothing (every operation refused, a stale token above all) must
		// leave inbox/ and the journal as they were, so only a group
		// that committed adopts, after its own work. A claim that may
		// take what inbox/ holds adopts first instead (adoptFirst).
		t.adoptInbox(db)
	}
	if !db.Exclusive() {
		answer()
	}
	t.reconcileCommitted(db)
	t.settleFinished(db)
	// A transaction the store refused as too large leaves the handle as
	// good as it was.
	healthy = err == nil || errors.Is(err, journal.ErrTooLarge)
}

// reconcileCommitted reconciles the files of the commits the group made
// on a store whose writers do not take turns (see reconcile). Only the
// last commit can take reconcile's shortcut (nobody committed since this
// handle's last commit); an earlier one of the same group (an operation
// run again alone) is read back in full.
func (t *Tree) reconcileCommitted(db journal.Store) {
	commits := t.batch.unreconciled
	t.batch.unreconciled = nil
	for i, evs := range commits {
		if i == len(commits)-1 {
			t.reconcile(db, evs)
		} else {
			t.reconcileTasks(db, evs)
		}
	}
}

// settleFinished puts the files finishMove moved during the group where
// the journal says now. finishMove acts on a transaction's snapshot, and
// a run whose snapshot another host's commit overtook is thrown away and
// run again: the move it made stays (a done task's file moved back to
// available/, say) unless someone reads the journal again after it.
func (t *Tree) settleFinished(db journal.Store) {
	t.batch.finishedMu.Lock()
	ids := t.batch.finished
	t.batch.finished = nil
	t.batch.finishedMu.Unlock()
	if len(ids) == 0 {
		return
	}
	evs := make([]record.Event, len(ids))
	for i, id := range ids {
		evs[i].Task = id
	}
	t.reconcileTasks(db, evs)
}

// commitAll commits group with bbolt's Batch semantics: an operation
// that fails after writing is taken out, the rest run again without it,
// and it runs alone last. A group too large for one transaction of the
// store (etcd's --max-txn-ops) is halved until it fits. The ops carry
// their outcomes; err is a failure of the store, after which the handle
// is not trusted.
func (t *Tree) commitAll(db journal.Store, group []*pendingOp) error {
	fail := func(ops []*pendingOp, err error) {
		for _, p := range ops {
			p.err, p.evs, p.committed = err, nil, false
		}
	}
	pending, solo := group, []*pendingOp(nil)
	for len(pending) > 0 {
		if len(pending) == 1 {
			solo = append(solo, pending[0])
			break
		}
		retry, err := t.commitGroup(db, pending)
		if errors.Is(err, journal.ErrTooLarge) {
			half := len(pending) / 2
			if err := t.commitAll(db, pending[:half]); err != nil {
				fail(slices.Concat(pending[half:], solo), err)
				return err
			}
			if err := t.commitAll(db, pending[half:]); err != nil {
				fail(solo, err)
				return err
			}
			break
		}
		if err != nil {
			fail(solo, err)
			return err
		}
		if retry == nil {
			break
		}
		solo = append(solo, retry)
		pending = slices.DeleteFunc(slices.Clone(pending), func(p *pendingOp) bool { return p == retry })
	}
	for i, p := range solo {
		if err := t.commitAlone(db, p); err != nil {
			fail(solo[i+1:], err)
			return err
		}
	}
	return nil
}

// commitAlone commits one operation in a transaction of its own. If that
// is too large for the store, the housekeeping every write does first may
// be what makes it so (hundreds of leases that ran out together, or of
// retries due at once: each claim would reap or promote them all, and fail,
// and no write could get through on etcd): catchUp does it in commits of
// its own, and the operation runs once more, lean: releasing none of the
// dependents of a task it completes (they are noted, and released in
// commits of their own: finishUnblocking). If it then notes a task, its
// dependents were part of what was too large, and the tree releases
// fewer inline from now on (fitting). A reap is housekeeping itself, and
// sizes its own commits (Reap). One too large by itself fails as before.
func (t *Tree) commitAlone(db journal.Store, p *pendingOp) error {
	inline := t.batch.fit.inlineReleases()
	_, err := t.commitGroup(db, []*pendingOp{p})
	if !errors.Is(err, journal.ErrTooLarge) || p.op == "reap" {
		return err
	}
	caughtUp, cerr := t.catchUp(db)
	if cerr != nil {
		return errors.Join(err, cerr)
	}
	t.batch.caughtUp = caughtUp
	defer func() { t.batch.caughtUp = nil }()
	noted := t.batch.unblocking
	t.batch.unblocking, t.batch.lean = false, true
	_, err = t.commitGroup(db, []*pendingOp{p})
	if err == nil && t.batch.unblocking && inline > 0 {
		t.batch.fit.fewerInline(inline)
	}
	t.batch.unblocking, t.batch.lean = t.batch.unblocking || noted, false
	return err
}

// catchUpChunk is how many reaps or promotions catchUp first puts in one
// commit: on etcd each costs about ten operations of a transaction, which
// holds 128 by default (--max-txn-ops). It halves on a refusal (fitting).
const catchUpChunk = 8

// catchUp reaps every expired or dead holder's lease, promotes every due
// waiting task and releases the dependents left waiting for done tasks,
// a few per commit, until none is left: the housekeeping of reapFirst and
// promoteDue, for when there is more of it than one transaction of the
// store takes (see commitAlone, finishUnblocking). Each commit
// is an ordinary write, its file moves made after it. It returns the
// leases it reaped.
func (t *Tree) catchUp(db journal.Store) (out []Reaped, err error) {
	err = t.inChunksLearned(func(limit int) (bool, error) {
		more := false
		var reaped []Reaped
		p := &pendingOp{op: "reap", fn: func(tx journal.Tx, now time.Time) ([]record.Event, error) {
			var evs []record.Event
			var err error
			reaped, evs, more, err = t.housekeep(tx, now, limit)
			return evs, err
		}}
		if _, err := t.commitGroup(db, []*pendingOp{p}); err != nil {
			return false, err
		}
		if p.committed {
			out = append(out, reaped...)
		}
		return more, p.err
	})
	return out, err
}

// reapedFor is what a claim reports it reaped: reaped, the leases its
// own commit reaped, after those catchUp reaped for it when it was too
// large (lean: commitAlone).
func (t *Tree) reapedFor(reaped []Reaped) []Reaped {
	if !t.batch.lean {
		return reaped
	}
	return append(slices.Clone(t.batch.caughtUp), reaped...)
}

// inChunksLearned is inChunks for work whose size is known only as it
// is done (housekeeping: catchUp, Reap): try commits up to limit items
// and says whether more are left; it runs until none are. limit is the
// chunk size the tree learned (fitting), halved, for this and every later
// call, whenever the store refuses a commit as too large.
func (t *Tree) inChunksLearned(try func(limit int) (more bool, err error)) error {
	for {
		limit := t.batch.fit.chunkSize()
		more, err := try(limit)
		switch {
		case errors.Is(err, journal.ErrTooLarge) && limit > 1:
			t.batch.fit.smallerChunk(limit)
		case err != nil:
			return err
		case !more:
			return nil
		}
	}
}

// housekeep reaps every expired or dead holder's lease, then promotes
// every due waiting task, then releases the dependents left waiting for
// done tasks (resumeUnblocking), limit of them in all (0: no limit): a sweep of
// the whole expiry index, for reap and catchUp. more reports that the
// limit was reached (there may be more to do); errNoChange that there was
// nothing.
func (t *Tree) housekeep(tx journal.Tx, now time.Time, limit int) (reaped []Reaped, evs []record.Event, more bool, err error) {
	sweepAll(tx)
	if reaped, evs, err = t.reapUpTo(tx, now, 0, limit); err != nil {
		return nil, nil, false, err
	}
	if limit == 0 || len(evs) < limit {
		due, err := promoteUpTo(tx, now, max(limit-len(evs), 0))
		if err != nil {
			return nil, nil, false, err
		}
		evs = append(evs, due...)
	}
	if limit == 0 || len(evs) < limit {
		released, err := resumeUnblocking(tx, now, max(limit-len(evs), 0))
		if err != nil {
			return nil, nil, false, err
		}
		evs = append(evs, released...)
	}
	if len(evs) == 0 {
		return nil, nil, false, errNoChange
	}
	return reaped, evs, limit > 0 && len(evs) >= limit, nil
}

// commitGroup runs ops in one transaction, commits it and makes its moves.
// An operation that fails having written nothing fails alone: the others
// commit. One that fails after writing rolls the transaction back and is
// returned as retry, for the caller to run the others again without it
// and then it alone; alone (len(ops) == 1), its error rolls back what it
// wrote. So a refusal never commits anything, whoever wrote it, and the
// rule "refuse before writing" is a fast path, not a convention that
// correctness hangs on. err is a failure of the whole group (the commit,
// a directory fsync); the ops carry their outcomes.
func (t *Tree) commitGroup(db journal.Store, ops []*pendingOp) (retry *pendingOp, err error) {
	reset := func() {
		retry = nil
		for _, p := range ops {
			p.evs, p.committed, p.err = nil, false, nil
		}
		clear(t.batch.moving)
	}
	defer func() { clear(t.batch.moving) }()
	reset() // for an Update that fails before running the function
	update := db.Update
	if pf, ok := db.(journal.Prefetcher); ok {
		ids, claims := groupReads(ops)
		update = func(fn func(journal.Tx) error) error { return pf.UpdateReading(ids, claims, fn) }
	}
	noted := false
	run := func(tx journal.Tx) error {
		reset() // the store may run this more than once: each run afresh
		// Before any step is judged: a journal restored from a backup
		// holds leases that ended since (restored.go).
		if lost, err := tx.LostTokens(); err != nil || lost {
			return cmp.Or(err, errTokensLost)
		}
		now := tx.Now()
		t.batch.holders.begin(tx)
		defer t.batch.holders.end()
		defer func() { noted = notedUnblocking(tx) }()
		start := tx.Writes()
		for _, p := range ops {
			before := tx.Writes()
			evs, err := p.fn(tx, now)
			switch {
			case err == nil:
				p.evs, p.committed = evs, true
				t.batch.noteMoving(evs)
			case tx.Writes() == before:
				if !errors.Is(err, errNoChange) { // errNoChange: success, nothing to record
					p.err = err
				}
			case len(ops) > 1:
				retry = p
				return errTrySolo
			default:
				if !errors.Is(err, errNoChange) {
					p.err = err
				}
				return errRolledBack
			}
		}
		if tx.Writes() == start {
			return errNothingWritten
		}
		return nil
	}
	err = update(run)
	if errors.Is(err, errTokensLost) {
		if err = t.endRestoredLeases(db); err == nil {
			err = update(run)
		}
	}
	// A commit the journal holds but could not sync happened: its files
	// are moved and its callers told so, as after any failure past the
	// commit (a claim is then undone at once, an add's content placed).
	unsynced, _ := errors.AsType[*journal.UnsyncedError](err)
	if unsynced != nil {
		err = nil
	}
	switch {
	case errors.Is(err, errTrySolo):
		return retry, nil
	case errors.Is(err, errRolledBack), errors.Is(err, errNothingWritten):
		return nil, nil
	case err != nil:
		// The store failed: nothing of this group committed, and what the
		// last run of the function reported is void. (A store that runs
		// the function again after a conflict may fail before the rerun:
		// the outcomes left in the ops are then those of the spoiled run,
		// such as "the snapshot changed; run again", never meant for a
		// caller.)
		for _, p := range ops {
			p.err, p.evs, p.committed = err, nil, false
		}
		return nil, err
	}
	t.batch.unblocking = t.batch.unblocking || noted
	var evs []record.Event
	for _, p := range ops {
		if p.committed {
			crashAt(p.op + ":after-commit")
			evs = append(evs, p.evs...)
		}
	}
	failed, err := t.mirrorEvents(evs, !db.Exclusive())
	if db.Exclusive() { // ties are bbolt's only (liveness.go)
		t.wakeHolders(evs)
	}
	if unsynced != nil {
		err = cmp.Or(err, error(unsynced))
	}
	// Committed: the journal holds the change; the next writer finishes
	// what is left. A task whose file could not move fails the operations
	// that moved it, not the others; a failed fsync fails them all.
	for _, p := range ops {
		if !p.committed || p.err != nil {
			continue
		}
		if err != nil {
			p.err = &AfterCommitError{Err: err}
			continue
		}
		for _, ev := range p.evs {
			if ferr := failed[ev.Task]; ferr != nil {
				p.err = &AfterCommitError{Err: ferr}
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if !db.Exclusive() {
		// After the callers are answered (runGroup).
		t.batch.unreconciled = append(t.batch.unreconciled, evs)
		return nil, nil
	}
	if len(failed) == 0 {
		// settle finished the commits before this one; this group's moves
		// are durable now.
		if head, err := db.Head(); err == nil {
			t.mirrored(head)
		}
	}
	return nil, nil
}
