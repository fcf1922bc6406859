package fence

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/fencectl/fencectl/journal/record"
)

// Authorize decides, with no I/O, whether token may act on task at now.
// claim is what the journal remembers of token (nil if it never issued it).
// It returns nil only when token is the task's current, unexpired lease.
func Authorize(task record.Task, token uint64, claim *record.Claim, now time.Time) error {
	e := &StaleTokenError{Task: task.ID, Yours: token, State: task.State}
	if task.State == record.Claimed && task.Lease != nil {
		e.Current, e.Holder, e.HeldSince = task.Lease.Token, task.Lease.Agent, task.Lease.ClaimedAt
		if task.Lease.Token == token {
			if Expired(*task.Lease, now) {
				e.Reason, e.LostAt, e.LostBy = ReasonLeaseExpired, task.Lease.Deadline, "expired"
				return e
			}
			return nil
		}
	}
	if claim == nil || claim.Task != task.ID {
		e.Reason = ReasonNotHeld
		return e
	}
	e.Reason = ReasonStaleToken
	if claim.Ended != nil {
		e.LostAt, e.LostBy = claim.Ended.At, lostBy(claim.Ended.By)
		if claim.Ended.Reason == ReasonJournalRestored {
			e.LostBy = LostByRestore
		}
	}
	return e
}

// Expired reports whether a lease has run out: at the deadline it is gone.
func Expired(l record.Lease, now time.Time) bool { return !now.Before(l.Deadline) }

// MaxTTL bounds a lease: deadlines must stay within what the expiry index
// can order (nanoseconds since 1970 in an int64 end in 2262).
const MaxTTL = 10 * 365 * 24 * time.Hour

// MinTTL is the shortest lease granted. A shorter one ends before its
// holder can act on the claim, and each lease that ends counts as an
// attempt: `--ttl 1ms` would fail tasks without running them.
const MinTTL = time.Second

// TTLRule says what a lease length must be, for messages that name the
// flag or variable that gave it.
var TTLRule = fmt.Sprintf("must be at least %s (a shorter lease ends before its holder can act on it) and at most %s (10 years)", MinTTL, MaxTTL)

// checkTTL checks a lease length asked for; 0 means the tree's default.
func checkTTL(ttl time.Duration) error {
	if ttl < 0 || ttl > 0 && ttl < MinTTL || ttl > MaxTTL {
		return invalidValue(InputTTL, RuleRange, ttl, TTLRule)
	}
	return nil
}

// checkDefaults checks a tree's settings, as init and recover write them:
// both validate here, so neither can write a journal whose leases last 0.
func checkDefaults(d record.Defaults) error {
	if err := checkTTL(d.TTL); err != nil || d.TTL == 0 {
		return invalidValue(InputTTL, RuleRange, d.TTL, TTLRule)
	}
	if d.MaxAttempts < 1 {
		return invalidValue(InputMaxAttempts, RuleRange, d.MaxAttempts, "must be at least 1")
	}
	if d.RetryBackoff < 0 || d.RetryBackoff > MaxTTL {
		return invalidValue(InputBackoff, RuleRange, d.RetryBackoff, fmt.Sprintf("must be 0 (no backoff) or positive, at most %s", MaxTTL))
	}
	if d.RetryBackoffMax < 0 || d.RetryBackoffMax > MaxTTL || d.RetryBackoffMax > 0 && d.RetryBackoffMax < d.RetryBackoff {
		return invalidValue(InputBackoff, RuleRange, d.RetryBackoffMax, "the backoff's cap must be 0 (the default, 1h) or at least the backoff itself")
	}
	return nil
}

// leaseLength is the length of a new or renewed lease: the one asked for,
// else the current lease's own (a renewal keeps what the claim asked), else
// the tree's default.
func leaseLength(asked time.Duration, current *record.Lease, def time.Duration) time.Duration {
	switch {
	case asked > 0:
		return asked
	case current != nil && current.TTL > 0:
		return current.TTL
	}
	return def
}

// IsRetry reports whether a call of type op with token is the repeat of the
// call that already ended that token's lease on this task: such a retry
// answers success and changes nothing.
func IsRetry(op record.EventType, task record.Task, claim *record.Claim) bool {
	return claim != nil && claim.Task == task.ID && claim.Ended != nil && claim.Ended.By == op
}

// MovedOn reports whether task has changed since claim's lease ended: it
// was claimed again, requeued, promoted after its backoff, edited. The
// answer to a retry then says so rather than describe the task as the
// retried call left it.
func MovedOn(task record.Task, claim *record.Claim) bool {
	return task.Lease != nil || task.Last == nil || task.Last.Token != claim.Token || task.Updated.After(claim.Ended.At)
}

func lostBy(t record.EventType) string {
	switch t {
	case record.EvReap:
		return "reaped"
	case record.EvRevoke:
		return "revoked"
	case record.EvComplete:
		return "completed"
	case record.EvRelease:
		return "released"
	case record.EvFail, record.EvMissing:
		return "failed"
	case record.EvCancel:
		return "cancelled"
	}
	return string(t)
}

// afterAttempt is where a claimed task goes when its lease ends in a
// counted attempt (fail or expiry) at now: Failed at max attempts; else
// Waiting until notBefore while it backs off (Backoff of the tree's
// defaults d, jittered by BackoffJitter of its token), or Available when
// the tree has no backoff.
func afterAttempt(task record.Task, d record.Defaults, now time.Time) (to record.State, notBefore time.Time) {
	if task.MaxAttempts > 0 && task.Attempts+1 >= task.MaxAttempts {
		return record.Failed, time.Time{}
	}
	var token uint64
	if task.Lease != nil {
		token = task.Lease.Token
	}
	b := Backoff(d.RetryBackoff, d.RetryBackoffMax, task.Attempts+1, BackoffJitter(task.ID, token))
	if b <= 0 {
		return record.Available, time.Time{}
	}
	return record.Waiting, now.Add(b)
}

// DefaultRetryBackoff is the retry backoff init gives a new tree.
const DefaultRetryBackoff = time.Second

// DefaultRetryBackoffMax caps the backoff of a tree whose defaults name
// none (RetryBackoffMax 0).
const DefaultRetryBackoffMax = time.Hour

// MaxJitter is how far BackoffJitter moves a backoff: ±20%.
const MaxJitter = 0.2

// Backoff is how long a task waits after its attempt-th failed attempt
// (1 for the first): base·2^(attempt−1), at most limit (DefaultRetryBackoffMax
// when limit is 0), then scaled by 1+jitter. A base of 0 is no backoff.
func Backoff(base, limit time.Duration, attempt int, jitter float64) time.Duration {
	if base <= 0 {
		return 0
	}
	if limit <= 0 {
		limit = max(DefaultRetryBackoffMax, base)
	}
	b := base
	for i := 1; i < attempt && b < limit; i++ {
		b *= 2
	}
	b = min(b, limit)
	return time.Duration(float64(b) * (1 + max(-MaxJitter, min(MaxJitter, jitter))))
}

// BackoffJitter is the jitter of the backoff that ends the claim with
// token on task id: a number in [−MaxJitter, MaxJitter] drawn from a hash
// of both, so that tasks that fail together come back apart, and every
// attempt of one task draws anew. It is decided when the event is made
// and the event records the resulting time (NotBefore), so replay folds
// the same value without knowing how it was drawn.
func BackoffJitter(id string, token uint64) float64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], token)
	h.Write(b[:])
	return (float64(h.Sum64()>>11)/(1<<53)*2 - 1) * MaxJitter
}

// restState is the state of a task nobody holds that waits for after and
// for notBefore, at now: Waiting while either holds, else Available. A
// notBefore already passed is dropped.
func restState(after []string, notBefore, now time.Time) (record.State, time.Time) {
	if !notBefore.IsZero() && !now.Before(notBefore) {
		notBefore = time.Time{}
	}
	if len(after) > 0 || !notBefore.IsZero() {
		return record.Waiting, notBefore
	}
	return record.Available, notBefore
}

// endEvent builds the event that ends task's lease by typ.
func endEvent(typ record.EventType, task record.Task, to record.State, agent, reason string, now time.Time) record.Event {
	ev := record.Event{Time: now, Type: typ, Task: task.ID, From: task.State, To: to, Agent: agent, Reason: reason}
	if task.Lease != nil {
		ev.Token = task.Lease.Token
		if agent == "" {
			ev.Agent = task.Lease.Agent
		}
	}
	return ev
}

// Apply folds one event into a task record, with no I/O. prev is nil for
// the events that create a task (add, adopt). Both the live path and replay
// use it, so they cannot drift apart.
func Apply(prev *record.Task, ev record.Event) (record.Task, error) {
	if prev == nil {
		if ev.Type != record.EvAdd && ev.Type != record.EvAdopt {
			return record.Task{}, fmt.Errorf("event %d: %s of unknown task %q", ev.Seq, ev.Type, ev.Task)
		}
		return record.Task{
			ID: ev.Task, State: ev.To, Priority: ev.Priority, MaxAttempts: ev.MaxAttempts,
			Seq: ev.Seq, Created: ev.Time, Updated: ev.Time,
			After: ev.After, Labels: ev.Labels, NotBefore: ev.NotBefore,
		}, nil
	}
	t := *prev
	if t.Lease != nil {
		l := *t.Lease
		t.Lease = &l
	}
	t.Updated = ev.Time
	switch ev.Type {
	case record.EvClaim:
		t.Lease = &record.Lease{Token: ev.Token, Agent: ev.Agent, ClaimedAt: ev.Time, RequestID: ev.RequestID}
		if ev.Deadline != nil {
			t.Lease.Deadline = *ev.Deadline
			t.Lease.TTL = ev.Deadline.Sub(ev.Time)
		}
	case record.EvHeartbeat:
		if t.Lease == nil || ev.Deadline == nil {
			return t, fmt.Errorf("event %d: heartbeat of %q without a lease", ev.Seq, ev.Task)
		}
		t.Lease.Deadline = *ev.Deadline
	case record.EvComplete, record.EvRelease, record.EvFail, record.EvReap, record.EvRevoke:
		if t.Lease == nil {
			return t, fmt.Errorf("event %d: %s of %q without a lease", ev.Seq, ev.Type, ev.Task)
		}
		if ev.Type == record.EvFail || ev.Type == record.EvReap {
			t.Attempts++
			t.NotBefore = ev.NotBefore // the end of the backoff, if it backs off
		}
		t.Last = &record.LeaseEnd{Token: t.Lease.Token, Agent: t.Lease.Agent, At: ev.Time, By: ev.Type, Reason: ev.Reason}
		t.Lease = nil
	case record.EvMissing, record.EvCancel:
		// Any lease ends, and the end is recorded even without one, so
		// that the task says why it is failed (and a repeated cancel knows
		// it is a repeat). No attempt: nobody tried.
		end := &record.LeaseEnd{At: ev.Time, By: ev.Type, Reason: ev.Reason}
		if t.Lease != nil {
			end.Token, end.Agent = t.Lease.Token, t.Lease.Agent
		}
		t.Last, t.Lease = end, nil
	case record.EvRequeue:
		t.Attempts, t.NotBefore = 0, time.Time{}
	case record.EvSet:
		if t.State == record.Claimed {
			return t, fmt.Errorf("event %d: set of claimed task %q", ev.Seq, ev.Task)
		}
		t.Priority, t.Labels, t.After, t.NotBefore = ev.Priority, ev.Labels, ev.After, ev.NotBefore
	case record.EvDepDone:
		t.After, t.NotBefore = ev.After, ev.NotBefore
	case record.EvDue:
		if t.State != record.Waiting {
			return t, fmt.Errorf("event %d: due of %q, which is %s, not waiting", ev.Seq, ev.Task, t.State)
		}
		t.NotBefore = time.Time{}
	case record.EvWait:
		if t.State != record.Available {
			return t, fmt.Errorf("event %d: wait of %q, which is %s, not available", ev.Seq, ev.Task, t.State)
		}
	case record.EvPut:
		if t.Lease == nil {
			return t, fmt.Errorf("event %d: put of %q without a lease", ev.Seq, ev.Task)
		}
	case record.EvAdd, record.EvAdopt:
		return t, fmt.Errorf("event %d: %s of existing task %q", ev.Seq, ev.Type, ev.Task)
	default:
		return t, fmt.Errorf("event %d: unknown type %q", ev.Seq, ev.Type)
	}
	t.State = ev.To
	return t, nil
}

// DepDoneEvent is what dependent records when dep, one of the tasks it
// waits for, is done: After without dep. A waiting task whose After is
// then empty, and that is not scheduled for later, goes to available/ in
// the same commit as dep's completion; one scheduled for later stays
// waiting for its time. A task that is not waiting (failed, say) keeps
// its state.
func DepDoneEvent(dependent record.Task, dep string, now time.Time) record.Event {
	var rest []string
	for _, id := range dependent.After {
		if id != dep {
			rest = append(rest, id)
		}
	}
	to, notBefore := dependent.State, dependent.NotBefore
	if to == record.Waiting || to == record.Available {
		to, notBefore = restState(rest, notBefore, now)
	}
	return record.Event{Time: now, Type: record.EvDepDone, Task: dependent.ID, From: dependent.State, To: to,
		Reason: "dependency " + dep + " done", After: rest, NotBefore: notBefore}
}

// ReasonDue and ReasonBackoffOver are the reasons of a due event: the
// time a task was scheduled for came, or its backoff after a failed
// attempt is over.
const (
	ReasonDue         = "scheduled time reached"
	ReasonBackoffOver = "backoff over"
)

// DueEvent is what a waiting task records when its NotBefore has come
// (now is at or after it) and it waits for nothing else: it goes to
// available/. ok is false when the task is not due.
func DueEvent(task record.Task, now time.Time) (ev record.Event, ok bool) {
	if task.State != record.Waiting || len(task.After) > 0 || task.NotBefore.IsZero() || now.Before(task.NotBefore) {
		return record.Event{}, false
	}
	why := ReasonDue
	if task.Attempts > 0 && task.Last != nil && (task.Last.By == record.EvFail || task.Last.By == record.EvReap) {
		why = ReasonBackoffOver
	}
	return record.Event{Time: now, Type: record.EvDue, Task: task.ID, From: record.Waiting, To: record.Available, Reason: why}, true
}

// ReasonUpgradeWait is the reason of the wait event that moves a task
// blocked in available/ (a journal written before the waiting state) to
// waiting/.
const ReasonUpgradeWait = "blocked: waits in waiting/ since the journal upgrade"

// WaitEvent moves task, blocked in available/ by a journal written
// before the waiting state, to waiting/; ok is false
// for any other task.
func WaitEvent(task record.Task, now time.Time) (ev record.Event, ok bool) {
	if task.State != record.Available || len(task.After) == 0 {
		return record.Event{}, false
	}
	return record.Event{Time: now, Type: record.EvWait, Task: task.ID, From: record.Available, To: record.Waiting,
		Reason: ReasonUpgradeWait}, true
}

// Unblocks reports whether ev makes prev done: the moment its dependents
// stop waiting for it.
func Unblocks(prev *record.Task, ev record.Event) bool {
	return prev != nil && prev.State != record.Done && ev.To == record.Done
}

// NormalizeLabels sorts labels and drops duplicates, as records keep them.
func NormalizeLabels(labels []string) []string {
	if len(labels) == 0 {
		return nil
	}
	out := slices.Clone(labels)
	slices.Sort(out)
	return slices.Compact(out)
}

// ApplyClaim folds an event into the record of the token it concerns, for
// the claims bucket. It returns false when the event touches no token.
func ApplyClaim(prev *record.Claim, ev record.Event) (record.Claim, bool) {
	switch ev.Type {
	case record.EvClaim:
		return record.Claim{Token: ev.Token, Task: ev.Task, Agent: ev.Agent, At: ev.Time, RequestID: ev.RequestID}, true
	case record.EvComplete, record.EvRelease, record.EvFail, record.EvReap, record.EvRevoke, record.EvMissing, record.EvCancel:
		if prev == nil {
			return record.Claim{}, false
		}
		c := *prev
		c.Ended = &record.LeaseEnd{Token: c.Token, Agent: c.Agent, At: ev.Time, By: ev.Type, Reason: ev.Reason}
		return c, true
	}
	return record.Claim{}, false
}

// ReasonFileMissing is the reason recorded when a task is settled because
// its file is in no directory (removed by hand).
const ReasonFileMissing = "task file missing"

// missingEvent settles task, whose file is in no directory: it fails, so
// that it is never handed out again and the tree and the journal agree; a
// done task stays done (its work was finished, and failing it would invite
// a requeue that redoes it). A lease it had ends; no attempt is counted,
// since nobody tried. Restoring the file and `requeue` bring it back.
func missingEvent(task record.Task, now time.Time) record.Event {
	to := record.Failed
	if task.State == record.Done {
		to = record.Done
	}
	return endEvent(record.EvMissing, task, to, "", ReasonFileMissing, now)
}

// settledMissing reports whether task was settled as having no file, so
// that its absence from every directory is no drift.
func settledMissing(task record.Task) bool {
	return (task.State == record.Failed || task.State == record.Done) && task.Last != nil && task.Last.By == record.EvMissing
}

// ReasonCancelled is the reason a cancel records: "cancelled", or
// "cancelled: R" with the operator's reason R.
const ReasonCancelled = "cancelled"

// Cancelled reports whether task sits in failed/ because an operator
// cancelled it (and was not requeued since).
func Cancelled(task record.Task) bool {
	return task.State == record.Failed && task.Last != nil && task.Last.By == record.EvCancel
}

// CancelEvent decides, with no I/O, what an operator's cancel of task does
// at now. A task that is not finished goes to failed/ with the reason
// "cancelled" (": reason" added when one is given); a lease it had ends,
// so its token is dead from that commit on; no attempt is counted. A task
// already cancelled answers retry (success, nothing to record), so an
// operator can repeat a cancel safely. A done task, or one that failed for
// another reason, is refused: it already finished (NotAvailableError).
func CancelEvent(task record.Task, agent, reason string, now time.Time) (ev record.Event, retry bool, err error) {
	switch {
	case Cancelled(task):
		return record.Event{}, true, nil
	case task.State == record.Done || task.State == record.Failed:
		return record.Event{}, false, &NotAvailableError{Task: task.ID, State: task.State, Op: "cancel"}
	}
	why := ReasonCancelled
	if reason != "" {
		why += ": " + reason
	}
	return endEvent(record.EvCancel, task, record.Failed, agent, why, now), false, nil
}
