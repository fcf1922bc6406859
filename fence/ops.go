package fence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Result is what a mutation did: the task's record afterwards and the event
// that recorded it. Retry is true when the call repeated one that had
// already succeeded with the same token: success, and nothing changed.
type Result struct {
	Task  record.Task
	Event *record.Event
	Retry bool
	// MovedOn, for a retry, says the task has changed since the retried
	// call ended the token's lease (MovedOn): Task is the task as it is
	// now, never with the lease of whoever holds it now.
	MovedOn bool
	Path    string // where the task's file is now
}

// AddRequest describes a new task.
type AddRequest struct {
	ID          string    // "" means a new ULID
	Priority    int64     // higher is claimed first
	MaxAttempts int       // 0 means the tree's default
	Content     io.Reader // the task file's content; nil means empty
	// After names tasks that must be done before this one can be
	// claimed; those already done are not waited for. An unknown one is
	// a *NoSuchTaskError, the task itself an *InvalidInputError.
	After []string
	// Labels are the task's labels (sorted and deduplicated when stored).
	Labels []string
	// NotBefore schedules the task: it waits in waiting/ until then. Delay
	// does the same relative to the tree's clock at the commit. At most
	// one of them; a time already passed is no wait.
	NotBefore time.Time
	Delay     time.Duration
}

// Add writes a new task into available/. The content is staged in
// .fence/tmp and fsynced before the lock is taken, so a large file does not
// hold up other agents; the journal commits, then the staged file is
// renamed into place.
func (t *Tree) Add(ctx context.Context, req AddRequest) (Result, error) {
	if req.ID == "" {
		req.ID = ulid.Make().String()
	} else if err := fsmirror.ValidateID(req.ID); err != nil {
		return Result{}, invalidf(InputID, RuleFormat, req.ID, "%v", err)
	}
	if req.MaxAttempts < 0 {
		return Result{}, invalidValue(InputMaxAttempts, RuleRange, req.MaxAttempts, "must be at least 1")
	}
	if err := checkDeps(req.ID, req.After); err != nil {
		return Result{}, err
	}
	labels, err := checkLabels(req.Labels)
	if err != nil {
		return Result{}, err
	}
	if err := checkSchedule(req.NotBefore, req.Delay); err != nil {
		return Result{}, err
	}
	if req.Content == nil {
		req.Content = eofReader{}
	}
	// A refusal writes nothing, not even content staged to be removed
	// again (50 MB of stdin for a task that exists): what would refuse it
	// is read first. The write checks it all again, in its own
	// transaction.
	if err := t.precheck(ctx, func(tx journal.Tx, _ time.Time) error {
		if _, known, err := tx.Task(req.ID); err != nil || known {
			if known {
				return invalidf(InputID, RuleExists, req.ID, "task %s already exists", req.ID)
			}
			return err
		}
		for _, dep := range req.After {
			if _, known, err := tx.Task(dep); err != nil || !known {
				if err == nil {
					err = &NoSuchTaskError{Task: dep, For: req.ID}
				}
				return err
			}
		}
		return nil
	}); err != nil {
		return Result{}, err
	}
	staged, err := t.mirror.Stage("add", req.Content, -1)
	if err != nil {
		return Result{}, err
	}
	var res Result
	_, committed, err := t.write(ctx, "add", func(tx journal.Tx, now time.Time) ([]record.Event, error) {
		res = Result{} // a group may run this more than once
		if _, known, err := tx.Task(req.ID); err != nil {
			return nil, err
		} else if known {
			return nil, invalidf(InputID, RuleExists, req.ID, "task %s already exists", req.ID)
		}
		if dir, _, err := t.mirror.Locate(req.ID); err == nil {
			return nil, invalidf(InputID, RuleUnknownFile, req.ID, "a file %s/%s exists that the journal does not know", dir, req.ID)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		max := req.MaxAttempts
		if max == 0 {
			d, err := tx.Defaults()
			if err != nil {
				return nil, err
			}
			max = d.MaxAttempts
		}
		after, err := pendingDeps(tx, req.After)
		if err != nil {
			return nil, err
		}
		due, err := promoteDue(tx, now)
		if err != nil {
			return nil, err
		}
		notBefore := req.NotBefore
		if req.Delay > 0 {
			notBefore = now.Add(req.Delay)
		}
		to, notBefore := restState(after, notBefore, now)
		rec, ev, err := commit(tx, nil, record.Event{
			Time: now, Type: record.EvAdd, Task: req.ID, To: to,
			Priority: req.Priority, MaxAttempts: max, Staged: staged, After: after, Labels: labels, NotBefore: notBefore,
		})
		res = Result{Task: rec, Event: &ev}
		return append(due, ev), err
	})
	if !committed {
		_ = t.mirror.Unstage(staged)
	}
	if ace, after := errors.AsType[*AfterCommitError](err); after {
		// Repeating an add is refused (the id exists), not answered as
		// done: an agent told to repeat it added the work again under
		// another id (found from outside).
		instead := "the task " + req.ID + " is added (the journal has it, and its content is kept in .fence/tmp): do not add it again; the next writer, or `fencectl replay`, puts its file in place"
		if _, unsynced := errors.AsType[*journal.UnsyncedError](ace.Err); unsynced {
			instead = "the task " + req.ID + " is added, its file in place: do not add it again"
		}
		err = &AfterCommitError{Err: ace.Err, Instead: instead}
	}
	res.Path = t.Path(req.ID, cmp.Or(res.Task.State, record.Available))
	return res, err
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// ClaimRequest describes a claim.
type ClaimRequest struct {
	ID        string        // "" claims the next ready task
	Agent     string        // recorded, never compared
	TTL       time.Duration // 0 means the tree's default
	Token     uint64        // restore: renew this claim if still current
	RequestID string        // recorded with the claim
	Wait      time.Duration // keep trying this long when nothing is ready
	// Labels, for claim-next, takes only a ready task that carries every
	// one of them. The ready index of the first is walked (name the
	// rarest first) and the others are checked on each candidate's record.
	Labels []string

	// RequestLock is RequestID's lock when the caller holds it for as long
	// as it works on the claim (run); without it Claim holds the lock for
	// the call only. Either way a request id held by another live process
	// is refused (*RequestInUseError).
	RequestLock *RequestLock

	// TieToProcess ties the claim to this process (see liveness.go) in
	// the claim's own commit: the tie exists before the claim does, so
	// a process killed right after the commit frees the task at once. A
	// KeeperConfig given the result's Tie keeps it; without a keeper,
	// call Tie.Untie once the claim is settled. bbolt trees only.
	TieToProcess bool
	// TieUnstarted, with TieToProcess, makes the tie start out unstarted:
	// the process's death before Tie.Started releases the task with no
	// attempt counted (ReasonDiedUnstarted), since nothing ran under the
	// claim (run --loop claims tasks ahead of their commands). Call
	// Started just before work begins.
	TieUnstarted bool
}

// ClaimResult is a granted (or renewed) claim.
type ClaimResult struct {
	Task     record.Task
	Token    uint64
	Agent    string
	Deadline time.Time
	Path     string
	Renewed  bool     // true for a restore with --token: same claim, lease renewed
	Reaped   []Reaped // expired leases this claim freed first
	// Tie is the claim's tie to this process (ClaimRequest.TieToProcess),
	// nil if none was asked for, or if it could not be made (TieErr).
	Tie    *ProcessTie
	TieErr error
}

// ProcessTie is a claim's tie to its process (see liveness.go): the
// name of its link in .fence/live, marked unstarted until Started.
type ProcessTie struct {
	mu            sync.Mutex
	metaDir, name string
	gone          bool
	// live, token, anchor and anchorSize say whose tie it is, and how
	// large its anchor was when it was made (see anchorGrew).
	live       *liveAnchor
	token      uint64
	anchor     *anchor
	anchorSize int64
}

// Untie drops the tie: the claim's holder is no longer this process.
// Safe to call more than once, and on nil.
func (p *ProcessTie) Untie() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.gone {
		p.gone = true
		unlinkLive(p.metaDir, p.name)
		if p.live != nil {
			p.live.untied(p.token)
		}
	}
}

// Started says that work begins under the claim now (run calls it just
// before it starts the command): from here the holder's death counts as
// an attempt. Until then it releases the task with none counted
// (ReasonDiedUnstarted). Called before the work, never after: a task
// whose command kills its holder must use up its attempts, not run
// forever. Safe on nil, and more than once.
func (p *ProcessTie) Started() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	started, ok := strings.CutSuffix(p.name, unstartedMark)
	if p.gone || !ok {
		return nil
	}
	if err := renameLive(p.metaDir, p.name, started); err != nil {
		return err
	}
	p.name = started
	return nil
}

// Reaped explains one expired lease that was freed.
type Reaped struct {
	Task        string
	Holder      string
	Token       uint64
	ExpiredFor  time.Duration // 0 for a holder that died
	Reason      string        // "lease expired" or "holder died" (ReasonHolderDied)
	Attempts    int           // after counting this expiry
	MaxAttempts int
	To          record.State
	Until       time.Time // for To waiting: the end of the backoff
}

// pollInterval is how often claim --wait looks again when nothing wakes
// it (see waitWake).
var pollInterval = 100 * time.Millisecond

// Claim reaps expired leases, then claims the named task or the next ready
// one (highest priority, then oldest) under a new token. With Token set it
// is the restore path instead: the same claim back, lease renewed, if that
// token is still current. With Wait it keeps trying while nothing is ready.
func (t *Tree) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	if err := checkTexts(req.Agent, ""); err != nil {
		return ClaimResult{}, err
	}
	if req.ID != "" {
		if err := fsmirror.ValidateID(req.ID); err != nil {
			return ClaimResult{}, invalidf(InputID, RuleFormat, req.ID, "%v", err)
		}
	}
	if err := checkTTL(req.TTL); err != nil {
		return ClaimResult{}, err
	}
	if err := checkRequestID(req.RequestID); err != nil {
		return ClaimResult{}, err
	}
	if l := req.RequestLock; l != nil && (req.RequestID == "" || l.agent != req.Agent || l.id != req.RequestID) {
		return ClaimResult{}, invalidf(InputRequestID, RuleConflict, req.RequestID, "the request lock held is for request id %q of agent %s, not %q of %s", l.id, l.agent, req.RequestID, req.Agent)
	}
	if req.RequestID != "" && req.RequestLock == nil {
		l, err := t.LockRequest(req.Agent, req.RequestID)
		if err != nil {
			return ClaimResult{}, err
		}
		defer l.Release()
	}
	if req.Wait < 0 {
		return ClaimResult{}, invalidValue(InputWait, RuleRange, req.Wait, "must not be negative")
	}
	if err := checkClaimLabels(req.Labels, req.ID != "" || req.Token != 0); err != nil {
		return ClaimResult{}, err
	}
	wake, stop := t.waitWake(req.Wait)
	defer stop()
	return keepTrying(ctx, req.Wait, wake, func() (ClaimResult, error) { return t.claimOnce(ctx, req) }, func(err error) bool {
		var na *NotAvailableError
		return req.Token == 0 && (errors.Is(err, ErrNothingToClaim) || errors.As(err, &na))
	})
}

// keepTrying runs try until it succeeds, fails in a way waiting cannot
// help (waitable false), wait has passed or ctx is done; it returns the
// last outcome. claim --wait and batch claims share it. It tries again
// when wake says a task may be claimable (see waitWake), and every
// wake.every (pollInterval for the zero waker).
func keepTrying[T any](ctx context.Context, wait time.Duration, wake waker, try func() (T, error), waitable func(error) bool) (T, error) {
	end := time.Now().Add(wait)
	every := cmp.Or(wake.every, pollInterval)
	for {
		res, err := try()
		left := time.Until(end)
		if err == nil || !waitable(err) || left <= 0 {
			return res, err
		}
		next := min(every, left)
		if wake.due != nil {
			if d, ok := wake.due(); ok {
				next = min(next, max(d, time.Millisecond))
			}
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-wake.c:
		case <-time.After(next):
		}
	}
}

// reapFirst is what every claim does first, in its transaction: free the
// expired leases, move the waiting tasks that are due to available/
// (promoteDue), release a few dependents a crash left waiting for a done
// task (resumeUnblocking), and note where that leaves the files of the tasks it
// moved (inClaimed: still in claimed/ or waiting/, since the moves come
// after the commit).
func (t *Tree) reapFirst(tx journal.Tx, now time.Time, keep uint64) (reaped []Reaped, evs []record.Event, d record.Defaults, inClaimed map[string]fsmirror.Dir, err error) {
	if reaped, evs, err = t.reapAll(tx, now, keep); err != nil {
		return nil, nil, d, nil, err
	}
	due, err := promoteDue(tx, now)
	if err != nil {
		return nil, nil, d, nil, err
	}
	if n := t.inlineReleases(); n > 0 { // after a crash: see unblockDependents
		released, err := resumeUnblocking(tx, now, n)
		if err != nil {
			return nil, nil, d, nil, err
		}
		due = append(due, released...)
	}
	evs = append(evs, due...)
	if d, err = tx.Defaults(); err != nil {
		return nil, nil, d, nil, err
	}
	inClaimed = map[string]fsmirror.Dir{}
	for _, r := range reaped {
		inClaimed[r.Task] = fsmirror.Claimed
	}
	for _, ev := range due {
		if _, moved := inClaimed[ev.Task]; !moved {
			inClaimed[ev.Task], _ = DirOf(ev.From)
		}
	}
	return reaped, evs, d, inClaimed, nil
}

// keepsReaps reports whether a refused claim still commits the reaps it
// made first: when there was nothing to claim (an expired lease whose
// task backs off would otherwise be reaped, and rolled back, by every
// claim), and when the refusal is about a task the claim reaped: a
// restore whose lease ran out is told it was reaped, so it must be; and
// a claim of the named task whose holder died or whose lease ran out is
// told the task now backs off, so it must, or every such claim would
// reap it again with a new backoff, roll back, and never take it.
func keepsReaps(err error, reaped []Reaped) bool {
	if errors.Is(err, ErrNothingToClaim) {
		return true
	}
	task := ""
	if stale, ok := errors.AsType[*StaleTokenError](err); ok {
		task = stale.Task
	} else if na, ok := errors.AsType[*NotAvailableError](err); ok {
		task = na.Task
	}
	return task != "" && slices.ContainsFunc(reaped, func(r Reaped) bool { return r.Task == task })
}

func (t *Tree) claimOnce(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	var res ClaimResult
	var claimErr error
	var named []string
	if req.ID != "" {
		named = []string{req.ID}
	}
	_, _, err := t.claimWrite(named...)(ctx, "claim", func(tx journal.Tx, now time.Time) ([]record.Event, error) {
		res.Tie.Untie()                    // made by a run of this that did not commit
		res, claimErr = ClaimResult{}, nil // a group may run this more than once
		// Given up while waiting for the lock (run got a signal): claim
		// nothing rather than a task the caller would only hand back.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var keep uint64 // the claim this request id holds, if any: it is taken back, not reaped
		if req.RequestID != "" {
			keep, _ = tx.Request(req.Agent, req.RequestID)
		}
		reaped, evs, d, inClaimed, err := t.reapFirst(tx, now, keep)
		if err != nil {
			return nil, err
		}
		res.Reaped = t.reapedFor(reaped)
		ev, rec, settled, err := t.claimStep(tx, req, now, d.TTL, inClaimed)
		evs = append(evs, settled.events...)
		if err != nil {
			if tx.Writes() != settled.writes || !keepsReaps(err, reaped) {
				// Refused after writing, or refused for a reason of its
				// own (a named task held or unknown, a token never
				// issued): fail the whole operation, so that the group
				// commit rolls all of it back, the reaps before it
				// included: a refusal changes nothing.
				return nil, err
			}
			claimErr = err
			if errors.Is(err, ErrNothingToClaim) && req.Wait > 0 {
				at, derr := nextDue(tx)
				if derr != nil {
					return nil, derr
				}
				t.noteDue(at)
			}
			if len(evs) == 0 {
				return nil, errNoChange
			}
			return evs, nil
		}
		res.Task, res.Token, res.Agent = rec, rec.Lease.Token, rec.Lease.Agent
		res.Deadline, res.Renewed = rec.Lease.Deadline, ev.Type == record.EvHeartbeat
		if req.TieToProcess && t.store.Name() == "bbolt" {
			// Before the commit: a link for a token that never commits
			// is tidied by the next reaper (no lease holds it). A run of
			// this function made again drops the last run's tie first.
			res.Tie.Untie()
			res.Tie, res.TieErr = nil, nil
			tie, err := t.tieClaim(res.Token, req.TieUnstarted)
			if err != nil {
				res.TieErr = &TieError{Err: err}
			} else {
				res.Tie = tie
			}
		}
		return append(evs, ev), nil
	})
	if ace, after := errors.AsType[*AfterCommitError](err); after && res.Token != 0 && !res.Renewed {
		// The claim committed and its file could not be moved into
		// claimed/ (EPERM, EIO…): its caller gets an error, so nobody
		// would hold this token until its lease ran out. Undone at once.
		res.Tie.Untie()
		res.Path = t.Path(res.Task.ID, record.Claimed)
		return ClaimResult{Reaped: res.Reaped}, t.UndoClaim(ctx, res, ace.Err)
	}
	if err != nil {
		res.Tie.Untie()
		return ClaimResult{}, err // nothing committed: no reap to tell of
	}
	if claimErr != nil {
		if stale, ok := errors.AsType[*StaleTokenError](claimErr); ok && len(res.Reaped) > 0 {
			stale.ReapedFirst = true // "nothing changed" would be false
		}
		return ClaimResult{Reaped: res.Reaped}, claimErr // the reaps before a refusal commit
	}
	res.Path = t.Path(res.Task.ID, record.Claimed)
	return res, nil
}

// missingLabels are the labels of want that rec does not carry.
func missingLabels(rec record.Task, want []string) []string {
	var missing []string
	for _, l := range want {
		if !slices.Contains(rec.Labels, l) {
			missing = append(missing, l)
		}
	}
	return missing
}

// UndoClaim releases claim c, made but never handed to its caller (its
// file could not be placed, its answer could not be written: why), so
// that the task is not held by a token nobody has until the lease runs
// out, then reaped as a failed attempt. It returns the error to report:
// why, and that the claim was undone (or, if the release failed too,
// that the lease stays until its TTL).
func (t *Tree) UndoClaim(ctx context.Context, c ClaimResult, why error) error {
	_, err := t.Release(ctx, FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: c.Agent, Reason: "claim undone: " + why.Error()})
	if err != nil {
		return &ClaimUndoneError{Task: c.Task.ID, Token: c.Token, Why: why, ReleaseErr: err}
	}
	return &ClaimUndoneError{Task: c.Task.ID, Token: c.Token, Why: why}
}

// settledOnTheWay is what claim-next settled before the claim proper: the
// events of tasks it found without a file and failed (nextClaimable), and
// the transaction's write count after them. They commit even if the claim
// is refused, like the reaps before it; a write after them followed by a
// refusal fails the whole operation instead (see pendingOp).
type settledOnTheWay struct {
	events []record.Event
	writes int
}

// claimStep is the claim proper, after reaping: restore, named or next.
func (t *Tree) claimStep(tx journal.Tx, req ClaimRequest, now time.Time, defaultTTL time.Duration, inClaimed map[string]fsmirror.Dir) (record.Event, record.Task, settledOnTheWay, error) {
	settled := settledOnTheWay{writes: tx.Writes()}
	ev, rec, err := t.claimStepOnly(tx, req, now, defaultTTL, inClaimed, &settled)
	return ev, rec, settled, err
}

func (t *Tree) claimStepOnly(tx journal.Tx, req ClaimRequest, now time.Time, defaultTTL time.Duration, inClaimed map[string]fsmirror.Dir, settled *settledOnTheWay) (record.Event, record.Task, error) {
	if req.Token != 0 {
		return restore(tx, req, now, defaultTTL)
	}
	if req.RequestID != "" {
		// The same agent asking again with the same request id gets the
		// claim that request was already granted, if it is still current:
		// the way back for a claimer that crashed before reading the answer.
		if tok, ok := tx.Request(req.Agent, req.RequestID); ok {
			// Refuse a request id used for another task before restore
			// writes its heartbeat.
			if c, known, err := tx.Claim(tok); err != nil {
				return record.Event{}, record.Task{}, err
			} else if known && req.ID != "" && c.Task != req.ID {
				return record.Event{}, record.Task{}, invalidf(InputRequestID, RuleConflict, req.RequestID, "request id %q of agent %s already holds task %s, not %s", req.RequestID, req.Agent, c.Task, req.ID)
			} else if known && len(req.Labels) > 0 {
				// Asked again with labels the granted task lacks: the same
				// conflict as another task named (a gpu worker must not be
				// handed a task that is not for it).
				rec, ok, err := tx.Task(c.Task)
				if err != nil {
					return record.Event{}, record.Task{}, err
				}
				if missing := missingLabels(rec, req.Labels); ok && len(missing) > 0 {
					return record.Event{}, record.Task{}, invalidf(InputRequestID, RuleConflict, req.RequestID, "request id %q of agent %s already holds task %s, which has no label %s", req.RequestID, req.Agent, c.Task, strings.Join(missing, ", "))
				}
			}
			again := req
			again.Token, again.ID = tok, ""
			return restore(tx, again, now, defaultTTL)
		}
	}
	id := req.ID
	if id == "" {
		var err error
		id, settled.events, err = t.nextClaimable(tx, inClaimed, now, req.Labels)
		settled.writes = tx.Writes()
		if err != nil {
			return record.Event{}, record.Task{}, err
		}
		if id == "" {
			if len(req.Labels) > 0 {
				// Other tasks may well be available: say which were asked for.
				return record.Event{}, record.Task{}, fmt.Errorf("%w with label %s", ErrNothingToClaim, strings.Join(req.Labels, " and "))
			}
			return record.Event{}, record.Task{}, ErrNothingToClaim
		}
	}
	rec, ok, err := tx.Task(id)
	if err != nil {
		return record.Event{}, rec, err
	}
	if !ok {
		return record.Event{}, rec, &NoSuchTaskError{Task: id}
	}
	if err := notClaimable(rec); err != nil {
		return record.Event{}, rec, err
	}
	if req.ID != "" {
		dir, err := fileDir(rec, inClaimed)
		if err == nil {
			t.finishMove(tx, rec.ID, dir)
			err = t.confirmed(tx, t.checkFile(rec.ID, dir, true))
		}
		if err != nil {
			return record.Event{}, rec, err
		}
	}
	token, err := tx.NextToken(now)
	if err != nil {
		return record.Event{}, rec, err
	}
	deadline := now.Add(leaseLength(req.TTL, nil, defaultTTL))
	after, ev, err := commit(tx, &rec, record.Event{
		Time: now, Type: record.EvClaim, Task: id, From: record.Available, To: record.Claimed,
		Agent: req.Agent, Token: token, Deadline: &deadline, RequestID: req.RequestID,
	})
	return ev, after, err
}

// checkRequestID allows what a script can pass safely: 1 to 128 of
// [A-Za-z0-9._:-].
func checkRequestID(id string) error {
	if len(id) > 128 {
		return invalidValue(InputRequestID, RuleFormat, nil, fmt.Sprintf("%d bytes, at most 128", len(id)))
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == ':' || r == '-') {
			return invalidValue(InputRequestID, RuleFormat, id, "use 1 to 128 of [A-Za-z0-9._:-]")
		}
	}
	return nil
}

// nextClaimable returns the first ready task whose file is a regular file
// in available/, or "". A task whose file is a symlink, FIFO or directory,
// or was moved by hand to another directory, is skipped and reported, so
// one bad entry cannot block the queue. A task whose file is in no
// directory at all is failed on the spot (missingEvent; settled holds the
// events): otherwise every later claim would look at it again, and 100k
// such tasks would make every claim stat 100k files.
func (t *Tree) nextClaimable(tx journal.Tx, inClaimed map[string]fsmirror.Dir, now time.Time, labels []string) (id string, settled []record.Event, err error) {
	return t.nextClaimableExcept(tx, inClaimed, now, nil, labels)
}

// nextClaimableExcept is nextClaimable passing over the tasks in skip
// (those a batch already chose).
func (t *Tree) nextClaimableExcept(tx journal.Tx, inClaimed map[string]fsmirror.Dir, now time.Time, skip map[string]bool, labels []string) (id string, settled []record.Event, err error) {
	var gone []string
	var readErr error
	ready := tx.Ready
	if len(labels) > 0 {
		// The first label's index, the others checked on the record: never
		// a scan of every ready task.
		ready = func(fn func(string) bool) { tx.ReadyLabel(labels[0], fn) }
	}
	ready(func(cand string) bool {
		if skip[cand] {
			return true
		}
		if len(labels) > 1 {
			rec, ok, err := tx.Task(cand)
			if err != nil {
				readErr = err
				return false
			}
			if !ok || !hasLabels(rec, labels[1:]) {
				return true
			}
		}
		dir := fsmirror.Available
		if d, moved := inClaimed[cand]; moved {
			dir = d
		} else if g, changed := t.batch.moving[cand]; changed {
			// An earlier operation of this group made it ready (a
			// release, a completed dependency, an add): its file moves
			// with the group's moves, from where it is now.
			if g.staged {
				id = cand
				return false
			}
			dir = g.dir
		}
		ok, err := t.mirror.Exists(dir, cand)
		if !ok && err == nil && t.finishMove(tx, cand, dir) {
			ok = true
		}
		switch {
		case ok:
			id = cand
			return false
		case err != nil:
			t.notify(NoticeSkipped, cand, err.Error()+"; not claimed")
		default:
			switch where, _, lerr := t.mirror.Locate(cand); {
			case lerr == nil && t.batch.shared.Load():
				// Another host's commit may have moved it after this
				// transaction's snapshot: a race, not drift (the commit
				// fails its check and runs again if so; replay --check
				// reports a file truly out of place).
			case lerr == nil:
				t.notify(NoticeSkipped, cand, string(dir)+"/"+cand+" is in "+string(where)+"/; not claimed")
			case errors.Is(lerr, fs.ErrNotExist):
				gone = append(gone, cand)
			default:
				t.notify(NoticeSkipped, cand, lerr.Error()+"; not claimed")
			}
		}
		return true
	})
	if readErr != nil {
		return "", nil, readErr
	}
	for _, cand := range gone {
		rec, ok, err := tx.Task(cand)
		if err != nil {
			return "", settled, err
		}
		if !ok {
			continue
		}
		if t.batch.shared.Load() && t.beingPlaced(tx, cand) {
			continue
		}
		_, ev, err := commit(tx, &rec, missingEvent(rec, now))
		if err != nil {
			return "", settled, err
		}
		settled = append(settled, ev)
		t.notify(NoticeMissingFile, cand, "its file is in no directory: failed it (reason \""+ReasonFileMissing+"\"); to run it again, put its content at "+t.Path(cand, record.Failed)+" and requeue it")
	}
	return id, settled, nil
}

// beingPlaced reports whether id's file is still staged by the command
// that last wrote it: on a journal whose writers do not take turns
// (etcd), an add commits, then moves its staged file into available/,
// and a claim by another process can see the task in between. Its file
// is in no state directory then, but it is not lost: the task is passed
// over, not failed as missing.
//
// The staged name is looked at first and the state directories after: a
// move from one to the other is one rename, so a file that is in neither
// when both were looked at in that order is missing, while one placed
// between the caller's look in its directory and this one is found here
// (looking only at the staged name failed a task whose add had just
// placed its file).
func (t *Tree) beingPlaced(tx journal.Tx, id string) bool {
	placed := false
	_ = tx.TaskEventsBackward(id, func(ev record.Event) (bool, error) {
		if ev.Staged != "" {
			placed, _ = t.mirror.StagedExists(ev.Staged)
		}
		return false, nil
	})
	if !placed {
		_, _, err := t.mirror.Locate(id)
		placed = err == nil
	}
	return placed
}

// finishMove is a touch's share of the per-task crash finish on a journal
// whose writers do not take turns (etcd), where nobody finishes "the last
// commit": a task whose file is in another state directory than dir, the
// one the journal has it in (a release, fail, complete, requeue or revoke
// that died after its commit), has its file moved to dir, and the claim
// or requeue goes on. It reports whether it moved the file. On bbolt the
// next writer finishes the last commit, so a file elsewhere was moved by
// hand: left alone.
//
// The file is located first and the snapshot confirmed second: a commit
// moves its file only after it commits, so a file that a commit newer
// than the snapshot put in from (another host's claim, say) shows as a
// changed record, and the file is left where it is (the run is spoiled
// and made again on a fresh snapshot). The record is read here, so that
// the confirmation covers it even when the caller knew the task only
// from an index (a claim of the next ready task): a deleted index entry
// is not something Confirm can compare.
func (t *Tree) finishMove(tx journal.Tx, id string, dir fsmirror.Dir) bool {
	if !t.batch.shared.Load() {
		return false
	}
	if ok, err := t.mirror.Exists(dir, id); err != nil || ok {
		return false
	}
	from, _, err := t.mirror.Locate(id)
	if err != nil || from == dir {
		return false
	}
	if _, known, err := tx.Task(id); err != nil || !known || tx.Confirm() != nil {
		return false
	}
	if err := t.mirror.Move(id, from, dir); err != nil {
		return false
	}
	t.batch.finishedMu.Lock()
	t.batch.finished = append(t.batch.finished, id)
	t.batch.finishedMu.Unlock()
	t.notify(NoticeSettled, id, settledDetail(from, dir))
	return true
}

// confirmed is a refusal err that rests on a task file, confirmed on a
// journal whose writers race (etcd): if what the transaction read has
// changed since, the file was compared with an old snapshot (another
// host's claim moved it after the snapshot was read), and the run is made
// again instead of refusing.
func (t *Tree) confirmed(tx journal.Tx, err error) error {
	if err == nil || !t.batch.shared.Load() {
		return err
	}
	if cerr := tx.Confirm(); cerr != nil {
		return cerr
	}
	return err
}

// checkFile refuses to act on a task whose entry in its state directory
// is not a regular file (a symlink or FIFO planted in the tree): the
// journal would change and the move would then fail. With mustExist a
// missing file is refused too (a claim must hand out a file).
func (t *Tree) checkFile(id string, dir fsmirror.Dir, mustExist bool) error {
	ok, err := t.mirror.Exists(dir, id)
	if err != nil {
		return &TaskFileError{Problem: FileNotRegular, Err: fmt.Errorf("%w; nothing changed", err)}
	}
	if !ok && mustExist {
		return &TaskFileError{Problem: FileMissing, Err: fmt.Errorf("task file %s is missing; nothing changed", t.mirror.Path(dir, id))}
	}
	return nil
}

// fileDir is where rec's file is right now: its state's directory, or
// claimed/ for a task reaped earlier in the same transaction.
func fileDir(rec record.Task, inClaimed map[string]fsmirror.Dir) (fsmirror.Dir, error) {
	if d, moved := inClaimed[rec.ID]; moved {
		return d, nil
	}
	return DirOf(rec.State)
}

// restore is claim --token: the same claim back with its lease renewed, if
// the token is still the task's current one; otherwise the stale-token
// refusal. Without an id it finds the task the token was issued for.
func restore(tx journal.Tx, req ClaimRequest, now time.Time, defaultTTL time.Duration) (record.Event, record.Task, error) {
	c, known, err := tx.Claim(req.Token)
	if err != nil {
		return record.Event{}, record.Task{}, err
	}
	id := req.ID
	if id == "" {
		if id, err = claimTask(tx, req.Token, c, known); err != nil {
			return record.Event{}, record.Task{}, err
		}
	}
	rec, ok, err := tx.Task(id)
	if err != nil {
		return record.Event{}, rec, err
	}
	if !ok {
		return record.Event{}, rec, &NoSuchTaskError{Task: id}
	}
	claim := endedClaim(rec, req.Token) // a folded task's claims are gone (compact.go)
	if known {
		claim = &c
	}
	if err := Authorize(rec, req.Token, claim, now); err != nil {
		return record.Event{}, rec, err
	}
	deadline := now.Add(leaseLength(req.TTL, rec.Lease, defaultTTL))
	reason := "claim --token"
	if req.RequestID != "" {
		reason = "claim --request-id " + req.RequestID
	}
	after, ev, err := commit(tx, &rec, record.Event{
		Time: now, Type: record.EvHeartbeat, Task: id, From: record.Claimed, To: record.Claimed,
		Agent: req.Agent, Token: req.Token, Deadline: &deadline, Reason: reason,
	})
	return ev, after, err
}

// reapExpired frees every lease whose deadline has passed (the first
// limit of them; 0: no limit), counting one attempt each. It reads only
// the expired part of the expiry index.
func reapExpired(tx journal.Tx, now time.Time, limit int) ([]Reaped, []record.Event, error) {
	var reaped []Reaped
	var evs []record.Event
	for _, id := range tx.Expired(now) {
		if limit > 0 && len(reaped) >= limit {
			break
		}
		rec, ok, err := tx.Task(id)
		if err != nil {
			return nil, nil, err
		}
		if !ok || rec.Lease == nil || !Expired(*rec.Lease, now) {
			continue // the index and the record disagree: trust the record
		}
		r, ev, err := reapOne(tx, rec, ReasonExpiredLease, now)
		if err != nil {
			return nil, nil, err
		}
		reaped = append(reaped, r)
		evs = append(evs, ev)
	}
	return reaped, evs, nil
}

// sweepAll makes tx's Expired look at every lease, on a store that
// otherwise sweeps now and then (journal.FullSweeper): reap is asked for.
func sweepAll(tx journal.Tx) {
	if s, ok := tx.(journal.FullSweeper); ok {
		s.SweepAll()
	}
}

// reapOne ends rec's lease with a reap event for reason (the lease
// expired, its holder died, the host rebooted), counting an attempt.
func reapOne(tx journal.Tx, rec record.Task, reason string, now time.Time) (Reaped, record.Event, error) {
	r, err := reapOf(tx, rec, reason, now)
	if err != nil {
		return r, record.Event{}, err
	}
	ev := endEvent(record.EvReap, rec, r.To, "", reason, now)
	ev.NotBefore = r.Until
	after, ev, err := commit(tx, &rec, ev)
	r.Attempts = after.Attempts
	return r, ev, err
}

// reapOf explains what reaping rec's lease for reason does; ExpiredFor is
// set for an expired lease only, Until for a task that backs off.
func reapOf(tx journal.Tx, rec record.Task, reason string, now time.Time) (Reaped, error) {
	d, err := tx.Defaults()
	if err != nil {
		return Reaped{}, err
	}
	to, until := afterAttempt(rec, d, now)
	r := Reaped{
		Task: rec.ID, Holder: rec.Lease.Agent, Token: rec.Lease.Token,
		Reason: reason, Attempts: rec.Attempts + 1,
		MaxAttempts: rec.MaxAttempts, To: to, Until: until,
	}
	if reason == ReasonExpiredLease {
		r.ExpiredFor = now.Sub(rec.Lease.Deadline)
	}
	return r, nil
}

// Reap frees expired leases now and explains each. With dryRun it only
// explains what it would free.
func (t *Tree) Reap(ctx context.Context, dryRun bool) ([]Reaped, error) {
	if dryRun {
		var out []Reaped
		err := t.read(ctx, func(tx journal.Tx, now time.Time) error {
			sweepAll(tx)
			died, err := t.diedOf(tx, now)
			if err != nil {
				return err
			}
			out = died // a store may run this more than once
			for _, id := range tx.Expired(now) {
				rec, ok, err := tx.Task(id)
				if err != nil {
					return err
				}
				if ok && rec.Lease != nil && !slices.ContainsFunc(died, func(r Reaped) bool { return r.Task == id }) {
					r, err := reapOf(tx, rec, ReasonExpiredLease, now)
					if err != nil {
						return err
					}
					out = append(out, r)
				}
			}
			return nil
		})
		return out, err
	}
	// On a store whose transactions are bounded (etcd: --max-txn-ops) it
	// reaps a few per commit, as catchUp does, until none is left; on
	// bbolt all in one commit.
	var out []Reaped
	err := t.inChunksLearned(func(limit int) (bool, error) {
		var reaped []Reaped
		more := false
		// Reap is the tree's housekeeping, asked for: it adopts inbox/
		// even when it finds no lease to end.
		_, _, err := t.writeAdopting(ctx, "reap", func(tx journal.Tx, now time.Time) ([]record.Event, error) {
			n := 0
			if t.batch.shared.Load() {
				n = limit
			}
			var evs []record.Event
			var err error
			reaped, evs, more, err = t.housekeep(tx, now, n)
			return evs, err
		})
		if err == nil {
			out = append(out, reaped...)
		}
		return more, err
	})
	return out, err
}

// FencedRequest names a task and the token that must hold it.
type FencedRequest struct {
	ID     string
	Token  uint64
	Agent  string        // recorded, never compared
	TTL    time.Duration // heartbeat: new lease length; 0 means the claim's own
	Reason string        // release, fail: recorded in the event
	// Result, for complete: stored as out/<ID>/result in the same locked
	// step as the completion, and only if the token is current.
	Result io.Reader
}

// output is a fenced write: content staged before the lock is taken and
// published to out/<task>/<name> only after the token was checked and the
// event committed.
type output struct {
	name    string
	content io.Reader
}

func (r FencedRequest) validate() error {
	if err := checkTexts(r.Agent, r.Reason); err != nil {
		return err
	}
	if err := fsmirror.ValidateID(r.ID); err != nil {
		return invalidf(InputID, RuleFormat, r.ID, "%v", err)
	}
	if r.Token == 0 {
		return invalidValue(InputToken, RuleMissing, nil, "every change to a claimed task must show the token its claim returned")
	}
	return checkTTL(r.TTL)
}

// fenced runs a token-checked mutation. The token is checked inside the
// same write transaction that changes the task, so no other process can act
// between the check and the change. A repeat of the call that ended the
// token's lease answers success and changes nothing.
func (t *Tree) fenced(ctx context.Context, typ record.EventType, req FencedRequest, out *output, build func(rec record.Task, now time.Time, d record.Defaults) record.Event) (Result, error) {
	if err := req.validate(); err != nil {
		return Result{}, err
	}
	var staged string
	if out != nil {
		if err := fsmirror.ValidateOutputName(out.name); err != nil {
			return Result{}, invalidf(InputOutputName, RuleFormat, out.name, "%v", err)
		}
		// A refusal writes nothing, not even the content staged to be
		// removed again: the token is checked first by a read (the write
		// checks it again, in its own transaction). A retry stores
		// nothing, so it stages nothing either.
		retry := false
		if err := t.precheck(ctx, func(tx journal.Tx, now time.Time) error {
			rec, claim, err := lookup(tx, req.ID, req.Token)
			if err != nil {
				return err
			}
			if retry = IsRetry(typ, rec, claim); retry {
				return nil
			}
			return Authorize(rec, req.Token, claim, now)
		}); err != nil {
			return Result{}, err
		}
		if retry {
			out = nil
		}
	}
	if out != nil {
		var err error
		if staged, err = t.mirror.Stage("out", out.content, -1); err != nil {
			return Result{}, err
		}
	}
	var res Result
	_, committed, err := t.writeFor(ctx, string(typ), []string{req.ID}, func(tx journal.Tx, now time.Time) ([]record.Event, error) {
		res = Result{} // a group may run this more than once
		rec, claim, err := lookup(tx, req.ID, req.Token)
		if err != nil {
			return nil, err
		}
		res.Task = rec
		if IsRetry(typ, rec, claim) {
			res.Retry, res.MovedOn = true, MovedOn(rec, claim)
			// The caller's lease has ended: the answer to a dead token
			// never carries the live one of whoever claimed the task since.
			res.Task.Lease = nil
			// The retry of a call whose commit landed and whose process
			// died before its move: the move is the retry's to finish (on
			// a journal whose writers take turns, the next writer's settle
			// has finished it already).
			if dir, err := DirOf(rec.State); err == nil {
				t.finishMove(tx, rec.ID, dir)
			}
			return nil, errNoChange
		}
		if err := Authorize(rec, req.Token, claim, now); err != nil {
			return nil, err
		}
		dir, err := DirOf(rec.State)
		if err != nil {
			return nil, err
		}
		if err := t.checkFile(rec.ID, dir, false); err != nil {
			return nil, err
		}
		if out != nil {
			if err := t.mirror.CheckOutput(req.ID, out.name); err != nil {
				return nil, &TaskFileError{Err: fmt.Errorf("%w; nothing changed (move the entry aside)", err)}
			}
			if err := t.mirror.PrepareOutput(req.ID); err != nil {
				return nil, fmt.Errorf("%w; nothing changed", err)
			}
		}
		d, err := tx.Defaults()
		if err != nil {
			return nil, err
		}
		var due []record.Event
		if typ != record.EvHeartbeat && typ != record.EvPut { // not on the hot path of a holder
			if due, err = promoteDue(tx, now); err != nil {
				return nil, err
			}
		}
		ev := build(rec, now, d)
		if out != nil {
			ev.Staged, ev.Output = staged, out.name
		}
		after, ev, unblocked, err := commitMore(tx, &rec, ev, t.inlineReleases())
		res.Task, res.Event = after, &ev
		return append(append(due, ev), unblocked...), err
	})
	if staged != "" && !committed {
		_ = t.mirror.Unstage(staged) // refused or failed: nothing is written
	}
	res.Path = t.Path(req.ID, res.Task.State)
	return res, err
}

// precheck reads, before a write stages its content, whether the write
// would be refused (fn's error), so that a refusal stages nothing. It
// does not wait for the lock: content is staged while a writer waits for
// its turn, not after, so under a busy (or stuck) writer the read is
// skipped and the write's own check, in its transaction, decides.
func (t *Tree) precheck(ctx context.Context, fn func(tx journal.Tx, now time.Time) error) error {
	if err := t.refuseForeign(); err != nil {
		return err
	}
	err := t.withTimeout(NoWait).read(ctx, fn)
	if errors.Is(err, ErrBusy) {
		return nil
	}
	return err
}

// lookup reads a task and what the journal knows of token.
func lookup(tx journal.Tx, id string, token uint64) (record.Task, *record.Claim, error) {
	rec, ok, err := tx.Task(id)
	if err != nil {
		return rec, nil, err
	}
	if !ok {
		return rec, nil, &NoSuchTaskError{Task: id}
	}
	c, known, err := tx.Claim(token)
	if err != nil || !known {
		return rec, endedClaim(rec, token), err // a folded task's claims are gone (compact.go)
	}
	return rec, &c, nil
}

// Heartbeat extends the lease of a task held by req.Token to now + TTL,
// or now + the claim's own lease length when TTL is 0.
func (t *Tree) Heartbeat(ctx context.Context, req FencedRequest) (Result, error) {
	return t.fenced(ctx, record.EvHeartbeat, req, nil, func(rec record.Task, now time.Time, d record.Defaults) record.Event {
		deadline := now.Add(leaseLength(req.TTL, rec.Lease, d.TTL))
		return record.Event{Time: now, Type: record.EvHeartbeat, Task: rec.ID, From: record.Claimed, To: record.Claimed,
			Agent: agentOr(req.Agent, rec), Token: req.Token, Deadline: &deadline}
	})
}

// Complete moves a task held by req.Token to done/, and stores req.Result
// (if any) as out/<ID>/result in the same step.
func (t *Tree) Complete(ctx context.Context, req FencedRequest) (Result, error) {
	var out *output
	if req.Result != nil {
		out = &output{name: "result", content: req.Result}
	}
	return t.fenced(ctx, record.EvComplete, req, out, func(rec record.Task, now time.Time, _ record.Defaults) record.Event {
		return endEvent(record.EvComplete, rec, record.Done, agentOr(req.Agent, rec), req.Reason, now)
	})
}

// Release gives a task held by req.Token back to available/ without
// counting an attempt.
func (t *Tree) Release(ctx context.Context, req FencedRequest) (Result, error) {
	return t.fenced(ctx, record.EvRelease, req, nil, func(rec record.Task, now time.Time, _ record.Defaults) record.Event {
		return endEvent(record.EvRelease, rec, record.Available, agentOr(req.Agent, rec), req.Reason, now)
	})
}

// Fail ends the lease of req.Token counting one attempt: to failed/ at
// max attempts; else to waiting/ until its backoff is over (the tree's
// retry_backoff, doubled per attempt, capped, jittered: afterAttempt), or
// straight back to available/ on a tree without backoff.
func (t *Tree) Fail(ctx context.Context, req FencedRequest) (Result, error) {
	return t.fenced(ctx, record.EvFail, req, nil, func(rec record.Task, now time.Time, d record.Defaults) record.Event {
		to, until := afterAttempt(rec, d, now)
		ev := endEvent(record.EvFail, rec, to, agentOr(req.Agent, rec), req.Reason, now)
		ev.NotBefore = until
		return ev
	})
}

// Put writes content to out/<ID>/<name> while req.Token holds the task:
// the fence at the resource. An agent that lost its lease is refused and
// writes nothing, so it cannot overwrite the work of the agent that took
// over. The file is replaced atomically; an event records the write.
func (t *Tree) Put(ctx context.Context, req FencedRequest, name string, content io.Reader) (Result, error) {
	if content == nil {
		content = eofReader{}
	}
	return t.fenced(ctx, record.EvPut, req, &output{name: name, content: content}, func(rec record.Task, now time.Time, _ record.Defaults) record.Event {
		return record.Event{Time: now, Type: record.EvPut, Task: rec.ID, From: record.Claimed, To: record.Claimed,
			Agent: agentOr(req.Agent, rec), Token: req.Token}
	})
}

func agentOr(agent string, rec record.Task) string {
	if agent == "" && rec.Lease != nil {
		return rec.Lease.Agent
	}
	return agent
}

// Verify reports whether req.Token is the task's current, unexpired token:
// the check a script runs before a side effect. It changes nothing.
func (t *Tree) Verify(ctx context.Context, req FencedRequest) (record.Task, error) {
	if err := req.validate(); err != nil {
		return record.Task{}, err
	}
	var (
		rec      record.Task
		restored bool
	)
	check := func(tx journal.Tx, now time.Time) error {
		// A journal restored from a backup holds leases that ended
		// since; the first write ends them (restored.go), and a read
		// that judges a token must not judge by them (found from
		// outside: verify called a revoked token current).
		if lost, err := tx.LostTokens(); err != nil || lost {
			restored = lost
			return err
		}
		r, claim, err := lookup(tx, req.ID, req.Token)
		rec = r
		if err != nil {
			return err
		}
		return Authorize(rec, req.Token, claim, now)
	}
	err := t.read(ctx, check)
	if err == nil && restored {
		// A write that changes nothing runs the ending of the leases
		// before anything else; then the token is judged again.
		if _, _, err = t.writeFor(ctx, "verify", nil, func(journal.Tx, time.Time) ([]record.Event, error) { return nil, errNoChange }); err != nil {
			return rec, err
		}
		restored = false
		if err = t.read(ctx, check); err == nil && restored {
			err = errTokensLost
		}
	}
	return rec, err
}

// Revoke frees a task's lease without its token (an operator's action).
// The old token is dead from then on; no attempt is counted.
func (t *Tree) Revoke(ctx context.Context, id, agent, reason string) (Result, error) {
	if err := checkTexts(agent, reason); err != nil {
		return Result{}, err
	}
	return t.operator(ctx, record.EvRevoke, id, func(rec record.Task, now time.Time) (record.Event, error) {
		if rec.State != record.Claimed || rec.Lease == nil {
			return record.Event{}, &NotAvailableError{Task: id, State: rec.State, Op: "revoke"}
		}
		return endEvent(record.EvRevoke, rec, record.Available, agent, reason, now), nil
	})
}

// Requeue brings a done or failed task back to available/ with its
// attempts reset and no backoff (an operator asked for it now); one that
// still waits for a dependency (a blocked task that was cancelled) goes
// to waiting/ instead.
func (t *Tree) Requeue(ctx context.Context, id, agent, reason string) (Result, error) {
	if err := checkTexts(agent, reason); err != nil {
		return Result{}, err
	}
	return t.operatorTx(ctx, record.EvRequeue, id, func(tx journal.Tx, rec record.Task, now time.Time) (record.Event, error) {
		if rec.State != record.Done && rec.State != record.Failed {
			return record.Event{}, &NotAvailableError{Task: id, State: rec.State, Op: "requeue"}
		}
		// Without its file the task would be handed out empty-handed, or
		// settled as missing again at the next claim.
		dir, err := DirOf(rec.State)
		if err != nil {
			return record.Event{}, err
		}
		t.finishMove(tx, id, dir) // a complete or fail that died after its commit (etcd)
		if ok, err := t.mirror.Exists(dir, id); err == nil && !ok {
			return record.Event{}, t.confirmed(tx, &TaskFileError{Err: fmt.Errorf("task %s has no file in %s/: put its content at %s, then requeue it; nothing changed", id, dir, t.Path(id, rec.State))})
		}
		to, _ := restState(rec.After, time.Time{}, now) // still blocked by a dependency: back to waiting/
		return record.Event{Time: now, Type: record.EvRequeue, Task: id, From: rec.State, To: to, Agent: agent, Reason: reason}, nil
	})
}

// Cancel ends a task that has not finished: it goes to failed/ with the
// reason "cancelled" (": reason" added when one is given), any lease on it
// ends (the holder's token is refused from this commit on, lost_by
// "cancelled"), and no attempt is counted. Only requeue brings it back.
// Cancelling a cancelled task again answers success with Retry and
// changes nothing; a done task, or one failed for another reason, is
// refused with NotAvailableError (see CancelEvent).
func (t *Tree) Cancel(ctx context.Context, id, agent, reason string) (Result, error) {
	if err := checkTexts(agent, reason); err != nil {
		return Result{}, err
	}
	return t.operatorTx(ctx, record.EvCancel, id, func(tx journal.Tx, rec record.Task, now time.Time) (record.Event, error) {
		ev, retry, err := CancelEvent(rec, agent, reason, now)
		if err != nil {
			return ev, err
		}
		// On etcd, a command on this task that died after its commit (a
		// release, a revoke, this very cancel: its repeat finishes it)
		// left its move undone.
		if dir, err := DirOf(rec.State); err == nil {
			t.finishMove(tx, id, dir)
		}
		if retry {
			return ev, errNoChange
		}
		return ev, nil
	})
}

// operator runs an unfenced operator action on one task. build may answer
// errNoChange: the action was done already (a retry), success with
// Result.Retry and nothing recorded.
func (t *Tree) operator(ctx context.Context, typ record.EventType, id string, build func(rec record.Task, now time.Time) (record.Event, error)) (Result, error) {
	return t.operatorTx(ctx, typ, id, func(_ journal.Tx, rec record.Task, now time.Time) (record.Event, error) { return build(rec, now) })
}

// operatorTx is operator for a build that reads more of the journal.
func (t *Tree) operatorTx(ctx context.Context, typ record.EventType, id string, build func(tx journal.Tx, rec record.Task, now time.Time) (record.Event, error)) (Result, error) {
	if err := fsmirror.ValidateID(id); err != nil {
		return Result{}, invalidf(InputID, RuleFormat, id, "%v", err)
	}
	var res Result
	_, _, err := t.writeFor(ctx, string(typ), []string{id}, func(tx journal.Tx, now time.Time) ([]record.Event, error) {
		res = Result{} // a group may run this more than once
		rec, ok, err := tx.Task(id)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &NoSuchTaskError{Task: id}
		}
		due, err := promoteDue(tx, now)
		if err != nil {
			return nil, err
		}
		if len(due) > 0 {
			rec, _, err = tx.Task(id) // it may be one of them
			if err != nil {
				return nil, err
			}
		}
		ev, err := build(tx, rec, now)
		if errors.Is(err, errNoChange) {
			res.Task, res.Retry = rec, true
			if len(due) > 0 {
				return due, nil
			}
			return nil, errNoChange
		}
		if err != nil {
			return nil, err
		}
		dir, err := DirOf(rec.State)
		if err != nil {
			return nil, err
		}
		if err := t.checkFile(rec.ID, dir, false); err != nil {
			return nil, err
		}
		after, ev, unblocked, err := commitMore(tx, &rec, ev, t.inlineReleases())
		res.Task, res.Event = after, &ev
		return append(append(due, ev), unblocked...), err
	})
	res.Path = t.Path(id, res.Task.State)
	return res, err
}
