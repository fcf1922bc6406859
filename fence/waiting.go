package fence

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// The waiting state.
//
// available/ lists exactly the tasks a claim could take now. A task that
// cannot be taken yet waits in waiting/, and its record says why: After
// names the dependencies not done yet (blocked), NotBefore the time it
// is scheduled for (add --not-before, --delay) or backs off until after a
// failed attempt (fail or reap below max attempts, see afterAttempt).
//
// Who moves it out: the commit that completes its last dependency
// (dep_done, unblockDependents), if it is not scheduled for later; and,
// for a task that waits for a time only, the first write at or after
// that time (promoteDue, a due event), as expired leases are reaped on
// every claim: the stores keep a due index ordered by NotBefore, so
// this reads only the tasks that are due, never every waiting one. A
// claim that waits (claim --wait) sets a timer to the earliest NotBefore.
//
// A journal written before the waiting state keeps blocked tasks in
// available/ (counted by journal.Tx.Blocked, with no task waiting). The
// first write moves them to waiting/ (a wait event each, migrateBlocked),
// which raises the journal's schema version: an older fencectl then
// refuses the tree rather than hand out a task it cannot see waits.

// WaitKind says why a task waits.
type WaitKind string

const (
	WaitBlocked    WaitKind = "blocked"     // for dependencies not done yet
	WaitScheduled  WaitKind = "scheduled"   // for the time it is scheduled for
	WaitBackingOff WaitKind = "backing_off" // for the end of its backoff after a failed attempt
)

// Reason is the refusal reason of a claim of a task that waits this way.
func (k WaitKind) Reason() string {
	switch k {
	case WaitScheduled:
		return ReasonScheduled
	case WaitBackingOff:
		return ReasonBackingOff
	}
	return ReasonBlocked
}

// Wait is why a task waits.
type Wait struct {
	Kind  WaitKind
	After []string  // blocked: the tasks it waits for
	Until time.Time // scheduled, backing off (and blocked ones scheduled too): not before then
	// Attempt, when backing off, is the failed attempt it backs off after.
	Attempt int
}

// WaitOf says why rec waits; ok is false for a task that does not (it is
// not waiting, nor blocked in an old journal's available/).
func WaitOf(rec record.Task) (w Wait, ok bool) {
	if rec.State != record.Waiting && !rec.Blocked() { // blocked: in an old journal's available/
		return Wait{}, false
	}
	w = Wait{Kind: WaitScheduled, After: rec.After, Until: rec.NotBefore}
	switch {
	case len(rec.After) > 0:
		w.Kind = WaitBlocked
	case backingOff(rec):
		w.Kind, w.Attempt = WaitBackingOff, rec.Attempts
	}
	return w, true
}

// backingOff reports whether rec waits because its last lease ended in
// a failed attempt (fail, reap).
func backingOff(rec record.Task) bool {
	return rec.Attempts > 0 && rec.Last != nil && (rec.Last.By == record.EvFail || rec.Last.By == record.EvReap) && !rec.NotBefore.IsZero()
}

// String says it as show and list do: "blocked by a,b", "scheduled for
// T", "backing off until T after attempt N".
func (w Wait) String() string {
	switch w.Kind {
	case WaitBlocked:
		s := "blocked by " + strings.Join(w.After, ",")
		if !w.Until.IsZero() {
			s += ", then scheduled for " + fmtTime(w.Until)
		}
		return s
	case WaitBackingOff:
		return fmt.Sprintf("backing off until %s after attempt %d", fmtTime(w.Until), w.Attempt)
	}
	return "scheduled for " + fmtTime(w.Until)
}

// notClaimable is why a claim cannot take rec now, or nil if it can.
func notClaimable(rec record.Task) error {
	if w, ok := WaitOf(rec); ok {
		e := &NotAvailableError{Task: rec.ID, State: rec.State, Op: "claim", Wait: &w}
		if w.Kind == WaitBlocked {
			e.WaitsFor = rec.After
		}
		return e
	}
	if rec.State != record.Available {
		return &NotAvailableError{Task: rec.ID, State: rec.State, Op: "claim"}
	}
	return nil
}

// promoteDue is what every write does first (with the reaps of a claim):
// the waiting tasks whose time has come go to available/, a due event
// each. It reads the due index only as far as the first task not due
// yet: O(due). Then it moves any task an old journal left blocked in
// available/ to waiting/ (migrateBlocked).
func promoteDue(tx journal.Tx, now time.Time) ([]record.Event, error) {
	return promoteUpTo(tx, now, 0)
}

// promoteUpTo is promoteDue that stops after limit due tasks (0: no
// limit), for catchUp's commits, each of which must fit one transaction
// of the store.
func promoteUpTo(tx journal.Tx, now time.Time, limit int) ([]record.Event, error) {
	evs, err := migrateBlocked(tx, now)
	if err != nil {
		return nil, err
	}
	var ids []string
	if err := tx.Scheduled(func(id string, at time.Time) bool {
		if now.Before(at) || limit > 0 && len(ids) >= limit {
			return false
		}
		ids = append(ids, id)
		return true
	}); err != nil {
		return nil, err
	}
	for _, id := range ids {
		rec, ok, err := tx.Task(id)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // the index and the record disagree: trust the record
		}
		ev, due := DueEvent(rec, now)
		if !due {
			continue
		}
		if _, ev, err = commit(tx, &rec, ev); err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// migrateBlocked moves the tasks a journal written before the waiting
// state keeps blocked in available/ to waiting/, a wait event each. Such
// a journal has no waiting task, and more blocked tasks (Tx.Blocked) than
// waiting ones; once they are moved, every blocked task is waiting, so
// the check costs two counts. It finds them through the dependents
// index, once.
func migrateBlocked(tx journal.Tx, now time.Time) ([]record.Event, error) {
	if tx.Blocked() <= tx.Counts()[record.Waiting] {
		return nil, nil
	}
	var ids []string
	if err := tx.Dependencies(func(_, id string) bool {
		ids = append(ids, id)
		return true
	}); err != nil {
		return nil, err
	}
	slices.Sort(ids)
	var evs []record.Event
	for _, id := range slices.Compact(ids) {
		rec, ok, err := tx.Task(id)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		ev, blocked := WaitEvent(rec, now)
		if !blocked {
			continue
		}
		if _, ev, err = commit(tx, &rec, ev); err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// NextDue reads when the earliest scheduled task comes due (zero if none
// is scheduled): what a waiting claim sets its timer to.
func nextDue(tx journal.Tx) (time.Time, error) {
	var at time.Time
	err := tx.Scheduled(func(_ string, t time.Time) bool {
		at = t
		return false
	})
	return at, err
}

// checkSchedule checks add's --not-before and --delay: at most one, the
// delay not negative and both within what the due index orders.
func checkSchedule(notBefore time.Time, delay time.Duration) error {
	switch {
	case !notBefore.IsZero() && delay != 0:
		return invalidValue(InputSchedule, RuleConflict, delay, "give --not-before or --delay, not both")
	case delay < 0 || delay > MaxTTL:
		return invalidValue(InputSchedule, RuleRange, delay, fmt.Sprintf("--delay must be positive and at most %s (10 years)", MaxTTL))
	case !notBefore.IsZero() && (notBefore.Year() < 1970 || notBefore.Year() > 2200):
		return invalidValue(InputSchedule, RuleRange, notBefore, "--not-before must be a time between 1970 and 2200")
	}
	return nil
}

// DefaultsRequest changes a tree's defaults: a nil field is kept.
type DefaultsRequest struct {
	TTL             *time.Duration
	MaxAttempts     *int
	RetryBackoff    *time.Duration
	RetryBackoffMax *time.Duration
	Agent           string // recorded, never compared
}

// SetDefaults changes the tree's defaults in one transaction, recorded as
// a defaults event that carries them all (it names no task). New tasks
// and leases use them from this commit on; a task keeps the max attempts
// it was added with. Nothing to change answers the defaults with changed
// false and records nothing. Bad values are an *InvalidInputError.
func (t *Tree) SetDefaults(ctx context.Context, req DefaultsRequest) (d record.Defaults, changed bool, err error) {
	_, _, err = t.write(ctx, string(record.EvDefaults), func(tx journal.Tx, now time.Time) ([]record.Event, error) {
		cur, err := tx.Defaults()
		if err != nil {
			return nil, err
		}
		d, changed = cur, false // a store may run this more than once
		if req.TTL != nil {
			d.TTL = *req.TTL
		}
		if req.MaxAttempts != nil {
			d.MaxAttempts = *req.MaxAttempts
		}
		if req.RetryBackoff != nil {
			d.RetryBackoff = *req.RetryBackoff
		}
		if req.RetryBackoffMax != nil {
			d.RetryBackoffMax = *req.RetryBackoffMax
		}
		if err := checkDefaults(d); err != nil {
			return nil, err
		}
		if d == cur {
			return nil, errNoChange
		}
		nd := d
		if _, err := tx.Append(record.Event{Time: now, Type: record.EvDefaults, Agent: req.Agent, Defaults: &nd}); err != nil {
			return nil, err
		}
		if err := tx.PutDefaults(d); err != nil {
			return nil, err
		}
		changed = true
		return nil, nil
	})
	return d, changed, err
}
