package fence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Batch claims: several tasks in one transaction, each under its own
// token. A named batch is all or nothing unless Partial; a batch of the
// next N takes up to N ready tasks in claim order. Either way the claims
// commit together or not at all, so a crash mid-batch leaves all of them
// claimed or none, and each token fences its own task only.

// MaxBatch bounds a batch: one transaction holds every claim of it.
const MaxBatch = 1000

// BatchClaimRequest asks for several claims at once.
type BatchClaimRequest struct {
	IDs     []string // the tasks to claim; empty: the next Count ready ones
	Count   int      // with no IDs: claim up to this many ready tasks
	Partial bool     // with IDs: claim those that can be, report the rest
	Agent   string
	TTL     time.Duration // 0 means the tree's default
	Wait    time.Duration // keep trying this long while nothing can be claimed
	Labels  []string      // with Count: only ready tasks that carry every one (see ClaimRequest.Labels)
}

// BatchClaimResult is what a batch claim granted and, with Partial, what
// it could not.
type BatchClaimResult struct {
	Assigned []ClaimResult
	Failed   []BatchFailure
	Reaped   []Reaped // expired leases the batch freed first
}

// BatchFailure is one task of a batch that could not be claimed, and why
// (a *NotAvailableError, *NoSuchTaskError or *TaskFileError).
type BatchFailure struct {
	ID  string
	Err error
}

// BatchError refuses a batch as a whole: a named batch of which some task
// could not be claimed (nothing was), or a partial one of which none could.
type BatchError struct {
	Failed  []BatchFailure
	Partial bool
}

func (e *BatchError) Error() string {
	var b strings.Builder
	if e.Partial {
		b.WriteString("none of the named tasks can be claimed: ")
	} else {
		fmt.Fprintf(&b, "%d of the named tasks cannot be claimed, so none was (a batch is all or nothing): ", len(e.Failed))
	}
	for i, f := range e.Failed {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Err.Error())
	}
	return b.String()
}

// waitable reports whether waiting may help: every task of the batch is
// known, and those refused are only not available yet.
func (e *BatchError) waitable() bool {
	for _, f := range e.Failed {
		var na *NotAvailableError
		if !errors.As(f.Err, &na) {
			return false
		}
	}
	return true
}

func (r BatchClaimRequest) validate() error {
	if err := checkTexts(r.Agent, ""); err != nil {
		return err
	}
	switch {
	case len(r.IDs) > 0 && r.Count > 0:
		return invalidf(InputBatch, RuleConflict, r.Count, "name the tasks or ask for the next %d, not both", r.Count)
	case len(r.IDs) == 0 && r.Count < 1:
		return invalidValue(InputBatch, RuleRange, r.Count, "must be at least 1")
	case r.Count > MaxBatch || len(r.IDs) > MaxBatch:
		return invalidValue(InputBatch, RuleRange, max(r.Count, len(r.IDs)), fmt.Sprintf("at most %d tasks in one batch", MaxBatch))
	case r.Partial && len(r.IDs) == 0:
		return invalidf(InputBatch, RuleConflict, r.Count, "partial is for named tasks; a batch of the next N already takes what is ready")
	case r.Wait < 0:
		return invalidValue(InputWait, RuleRange, r.Wait, "must not be negative")
	}
	seen := map[string]bool{}
	for _, id := range r.IDs {
		if err := fsmirror.ValidateID(id); err != nil {
			return invalidf(InputID, RuleFormat, id, "%v", err)
		}
		if seen[id] {
			return invalidf(InputID, RuleConflict, id, "task %s is named twice", id)
		}
		seen[id] = true
	}
	if err := checkClaimLabels(r.Labels, len(r.IDs) > 0); err != nil {
		return err
	}
	return checkTTL(r.TTL)
}

// ClaimBatch reaps expired leases, then claims the named tasks (all of
// them, or with Partial those that can be) or up to Count ready ones, in
// one transaction, each under a new token. With Wait it keeps trying while
// nothing can be claimed (or, for named tasks, while some are not
// available yet).
func (t *Tree) ClaimBatch(ctx context.Context, req BatchClaimRequest) (BatchClaimResult, error) {
	if err := req.validate(); err != nil {
		return BatchClaimResult{}, err
	}
	wake, stop := t.waitWake(req.Wait)
	defer stop()
	return keepTrying(ctx, req.Wait, wake, func() (BatchClaimResult, error) { return t.claimBatchFitting(ctx, req) }, func(err error) bool {
		var be *BatchError
		return errors.Is(err, ErrNothingToClaim) || errors.As(err, &be) && be.waitable()
	})
}

func (t *Tree) claimBatchOnce(ctx context.Context, req BatchClaimRequest) (BatchClaimResult, error) {
	var res BatchClaimResult
	var refusal error
	_, _, err := t.claimWrite(req.IDs...)(ctx, "claim", func(tx journal.Tx, now time.Time) ([]record.Event, error) {
		res, refusal = BatchClaimResult{}, nil // a group may run this more than once
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		reaped, evs, d, inClaimed, err := t.reapFirst(tx, now, 0)
		if err != nil {
			return nil, err
		}
		res.Reaped = t.reapedFor(reaped)
		before := tx.Writes()
		var todo []record.Task
		if len(req.IDs) > 0 {
			todo, res.Failed, err = t.claimable(tx, req.IDs, inClaimed)
			if err == nil && len(res.Failed) > 0 && (!req.Partial || len(todo) == 0) {
				refusal, todo = &BatchError{Failed: res.Failed, Partial: req.Partial}, nil
			}
		} else {
			var settled []record.Event
			todo, settled, err = t.nextClaimables(tx, req.Count, inClaimed, now, req.Labels)
			evs = append(evs, settled...)
			before = tx.Writes()
			if err == nil && len(todo) == 0 {
				refusal = ErrNothingToClaim
			}
		}
		if err != nil {
			return nil, err
		}
		if refusal != nil {
			if tx.Writes() != before {
				return nil, refusal // never: the checks above do not write
			}
			if len(evs) == 0 {
				return nil, errNoChange
			}
			return evs, nil // the reaps before it still commit
		}
		for _, rec := range todo {
			token, err := tx.NextToken(now)
			if err != nil {
				return nil, err
			}
			deadline := now.Add(leaseLength(req.TTL, nil, d.TTL))
			after, ev, err := commit(tx, &rec, record.Event{
				Time: now, Type: record.EvClaim, Task: rec.ID, From: record.Available, To: record.Claimed,
				Agent: req.Agent, Token: token, Deadline: &deadline,
			})
			if err != nil {
				return nil, err
			}
			evs = append(evs, ev)
			res.Assigned = append(res.Assigned, ClaimResult{
				Task: after, Token: token, Agent: req.Agent, Deadline: deadline, Path: t.Path(rec.ID, record.Claimed),
			})
		}
		return evs, nil
	})
	if ace, after := errors.AsType[*AfterCommitError](err); after && len(res.Assigned) > 0 {
		// The claims committed and a file could not be moved into
		// claimed/: the caller gets an error, so nobody would hold these
		// tokens until their leases ran out, then each be reaped as a
		// failed attempt (found from outside). Undone at once, as a
		// single claim is.
		return BatchClaimResult{Reaped: res.Reaped}, t.undoClaims(ctx, res.Assigned, ace.Err)
	}
	if err != nil {
		return BatchClaimResult{}, err // nothing committed: no reap to tell of
	}
	if refusal != nil {
		if !req.Partial {
			res.Failed = nil // the refusal carries them
		}
		return BatchClaimResult{Reaped: res.Reaped, Failed: res.Failed}, refusal
	}
	return res, nil
}

// claimBatchFitting is claimBatchOnce, except that a claim of the next N
// ready tasks (up to N) too large for one transaction of the store (etcd's
// --max-txn-ops) is made again for half as many, until it fits. Named
// tasks are all or nothing: too many of them fail as they are.
func (t *Tree) claimBatchFitting(ctx context.Context, req BatchClaimRequest) (BatchClaimResult, error) {
	for {
		res, err := t.claimBatchOnce(ctx, req)
		if !errors.Is(err, journal.ErrTooLarge) || len(req.IDs) > 0 || req.Count <= 1 {
			return res, err
		}
		req.Count /= 2
	}
}

// claimable reads the named tasks and sorts them into those that can be
// claimed now and those that cannot (with why), writing nothing.
func (t *Tree) claimable(tx journal.Tx, ids []string, inClaimed map[string]fsmirror.Dir) (ok []record.Task, failed []BatchFailure, err error) {
	for _, id := range ids {
		rec, known, err := tx.Task(id)
		if err != nil {
			return nil, nil, err
		}
		var why error
		switch {
		case !known:
			why = &NoSuchTaskError{Task: id}
		case notClaimable(rec) != nil:
			why = notClaimable(rec)
		default:
			dir, derr := fileDir(rec, inClaimed)
			if derr == nil {
				t.finishMove(tx, id, dir)
				derr = t.confirmed(tx, t.checkFile(id, dir, true))
			}
			why = derr
		}
		if why != nil {
			failed = append(failed, BatchFailure{ID: id, Err: why})
			continue
		}
		ok = append(ok, rec)
	}
	return ok, failed, nil
}

// nextClaimables finds up to n ready tasks in claim order, as claim-next
// does for one (nextClaimable), settling tasks found without a file on
// the way. It claims nothing; to find the next one after the first it
// skips those already chosen.
func (t *Tree) nextClaimables(tx journal.Tx, n int, inClaimed map[string]fsmirror.Dir, now time.Time, labels []string) ([]record.Task, []record.Event, error) {
	var out []record.Task
	var settled []record.Event
	chosen := map[string]bool{}
	for len(out) < n {
		id, evs, err := t.nextClaimableExcept(tx, inClaimed, now, chosen, labels)
		settled = append(settled, evs...)
		if err != nil || id == "" {
			return out, settled, err
		}
		rec, ok, err := tx.Task(id)
		if err != nil {
			return nil, settled, err
		}
		chosen[id] = true
		if ok && rec.State == record.Available {
			out = append(out, rec)
		}
	}
	return out, settled, nil
}

// undoClaims releases claims made but never handed to their caller (see
// UndoClaim), and reports each.
func (t *Tree) undoClaims(ctx context.Context, claims []ClaimResult, why error) error {
	var errs []error
	for _, c := range claims {
		errs = append(errs, t.UndoClaim(ctx, c, why))
	}
	return errors.Join(errs...)
}
