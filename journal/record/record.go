// Package record holds the domain's words: a task and its State, the
// Lease on it, the Claim behind every token, the Event that changes it and
// the tree's Defaults. It is a leaf that every layer imports (journal and
// its stores keep these records, fence decides on them, the CLI prints
// them) and that nothing re-exports; it imports nothing of fencectl's.
//
// The JSON tags are the records' JSON form (fencectl show, log and the
// journals written before the binary codec); package journal's codec is
// the stored form. Neither may change without a migration.
package record

import "time"

// State is where a task is in its lifecycle. Each state has one directory of
// the same name in the tree (fence.DirOf); docs/lifecycle.md draws the moves.
type State string

const (
	// Waiting tasks sit in waiting/: not claimable yet, and the record says
	// why: After names the dependencies not done yet (blocked), NotBefore
	// the time it is scheduled for or backs off until. They leave it for
	// Available in the commit that completes their last dependency
	// (dep_done), on the first write at or after NotBefore (due), or when
	// a set clears what they wait for; and by an operator's cancel
	// (Failed).
	Waiting State = "waiting"
	// Available tasks wait in available/: exactly the tasks a claim could
	// take now. They leave it by a claim (to Claimed), by any agent, by a
	// set that gives them dependencies not done yet (Waiting), or by an
	// operator's cancel (Failed).
	Available State = "available"
	// Claimed tasks sit in claimed/ under a lease. They leave it by complete
	// (Done), release (Available), fail below max attempts (Waiting while
	// it backs off, else Available), fail at max attempts (Failed), all
	// with the current token; by reap once the lease expired (as fail);
	// and by an operator's revoke (Available) or cancel (Failed).
	Claimed State = "claimed"
	// Done tasks sit in done/. Only an operator's requeue moves them (to
	// Available, or Waiting if they still wait for dependencies).
	Done State = "done"
	// Failed tasks reached max attempts, or were cancelled by an operator,
	// and sit in failed/, the dead letter directory. Only an operator's
	// requeue moves them (to Available, or Waiting if they still wait for
	// dependencies).
	Failed State = "failed"
)

// States lists every state in lifecycle order.
var States = []State{Waiting, Available, Claimed, Done, Failed}

// Task is the stored record of one task. It is derived from the event log:
// replaying the events of a task from the start yields this record.
type Task struct {
	ID          string    `json:"id"`
	State       State     `json:"state"`
	Priority    int64     `json:"priority"`
	MaxAttempts int       `json:"max_attempts"`
	Attempts    int       `json:"attempts"`
	Seq         uint64    `json:"seq"` // event seq of the add: the task's age for ordering
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	Lease       *Lease    `json:"lease,omitempty"`
	Last        *LeaseEnd `json:"last,omitempty"` // how the latest lease ended
	// After lists the tasks this one waits for that are not done yet, in
	// the order given; while it is not empty the task is blocked: it
	// waits in waiting/ (or, in a journal written before the waiting
	// state, in available/: see Blocked) and no claim takes it.
	After []string `json:"after,omitempty"`
	// Labels are the task's labels, sorted and without duplicates; a claim
	// may ask for tasks that carry all of some labels.
	Labels []string `json:"labels,omitempty"`
	// NotBefore, when not zero, is the earliest time a claim may take the
	// waiting task: the time it is scheduled for (add --not-before), or
	// the end of its backoff after a failed attempt. The due event that
	// makes it available clears it.
	NotBefore time.Time `json:"not_before,omitzero"`
}

// Blocked reports whether t waits for other tasks: it is waiting (or
// available, in a journal written before the waiting state, which fence
// moves to waiting/ on the first write) and After is not empty. The
// stores count such tasks (journal.Tx.Blocked).
func (t Task) Blocked() bool {
	return len(t.After) > 0 && (t.State == Waiting || t.State == Available)
}

// BlockedBy returns the tasks t waits for, if it waits for any: it is
// not finished (waiting, or available in an old journal) and After is
// not empty.
func (t Task) BlockedBy() []string {
	if t.State == Waiting || t.State == Available {
		return t.After
	}
	return nil
}

// Scheduled reports whether t is a waiting task that waits for a time
// only (not for dependencies): it is in the stores' due index, ordered
// by NotBefore.
func (t Task) Scheduled() bool {
	return t.State == Waiting && len(t.After) == 0 && !t.NotBefore.IsZero()
}

// Ready reports whether a claim-next may take t: available, waiting for
// nothing.
func (t Task) Ready() bool { return t.State == Available && len(t.After) == 0 }

// Lease is the current claim on a claimed task.
type Lease struct {
	Token     uint64    `json:"token"`
	Agent     string    `json:"agent"`
	ClaimedAt time.Time `json:"claimed_at"`
	Deadline  time.Time `json:"deadline"`
	// TTL is the lease length the claim asked for; a heartbeat without its
	// own --ttl extends by this much.
	TTL       time.Duration `json:"ttl"`
	RequestID string        `json:"request_id,omitempty"`
}

// LeaseEnd records how a lease ended, so a stale token can be explained.
type LeaseEnd struct {
	Token  uint64    `json:"token"`
	Agent  string    `json:"agent"`
	At     time.Time `json:"at"`
	By     EventType `json:"by"`
	Reason string    `json:"reason,omitempty"`
}

// Claim is what the journal remembers of every token it issued.
type Claim struct {
	Token     uint64    `json:"token"`
	Task      string    `json:"task"`
	Agent     string    `json:"agent"`
	At        time.Time `json:"at"`
	RequestID string    `json:"request_id,omitempty"`
	Ended     *LeaseEnd `json:"ended,omitempty"`
}

// EventType names a state change.
type EventType string

// Event types. Every state change appends exactly one event.
const (
	EvAdd       EventType = "add"       // new task (fencectl add)
	EvAdopt     EventType = "adopt"     // file found in inbox/ or a state dir became a task
	EvClaim     EventType = "claim"     // new lease, new token
	EvHeartbeat EventType = "heartbeat" // lease extended (also claim --token renewals)
	EvComplete  EventType = "complete"  // claimed → done
	EvRelease   EventType = "release"   // claimed → available, no attempt counted
	EvFail      EventType = "fail"      // claimed → available or failed, one attempt
	EvReap      EventType = "reap"      // lease expired → available or failed, one attempt
	EvRevoke    EventType = "revoke"    // operator freed the lease, no attempt counted
	EvRequeue   EventType = "requeue"   // done/failed → available, attempts reset
	EvPut       EventType = "put"       // a fenced output written to out/<task>/<name>; no state change
	EvMissing   EventType = "missing"   // the task's file is in no directory: → failed (done stays done), any lease ends, no attempt counted
	EvCancel    EventType = "cancel"    // operator: any state but done/failed → failed, any lease ends (its token dies), no attempt counted
	EvSet       EventType = "set"       // operator: new priority, labels and dependencies (the event carries all three); no state change
	EvDepDone   EventType = "dep_done"  // a task this one waited for is done: After is what it still waits for; waiting → available once it waits for nothing
	EvDue       EventType = "due"       // waiting → available: the time it waited for (NotBefore) has come
	EvWait      EventType = "wait"      // available → waiting: a task blocked in available/ by a journal written before the waiting state
	EvDefaults  EventType = "defaults"  // operator: new tree defaults (the event carries them all; Task is empty); no task changes
	EvCompacted EventType = "compacted" // operator (fencectl compact): the events of finished tasks were folded into their records (Reason says how many, up to which seq; Task is empty); no task changes
)

// Event is one entry of the append-only log. From and To are the task's
// state before and after; the other fields depend on Type.
type Event struct {
	Seq         uint64     `json:"seq"`
	Time        time.Time  `json:"time"`
	Type        EventType  `json:"type"`
	Task        string     `json:"task"`
	From        State      `json:"from,omitempty"`
	To          State      `json:"to"`
	Agent       string     `json:"agent,omitempty"`
	Token       uint64     `json:"token,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Deadline    *time.Time `json:"deadline,omitempty"`
	Priority    int64      `json:"priority,omitempty"`
	MaxAttempts int        `json:"max_attempts,omitempty"`
	RequestID   string     `json:"request_id,omitempty"`
	Staged      string     `json:"staged,omitempty"` // add, put, complete --result: staging file name in .fence/tmp
	Output      string     `json:"output,omitempty"` // put, complete --result: name of the file in out/<task>/
	Source      string     `json:"source,omitempty"` // adopt: directory the file was found in
	// After, Labels and NotBefore are the task's new values of these
	// fields: add sets them; set sets After and Labels (with Priority);
	// dep_done sets After (what the task still waits for) and NotBefore;
	// fail and reap set NotBefore (the end of the backoff, decided with
	// its jitter when the event was made, so that replay folds the same
	// time); due clears it.
	After     []string  `json:"after,omitempty"`
	Labels    []string  `json:"labels,omitempty"`
	NotBefore time.Time `json:"not_before,omitzero"`
	// Defaults, for a defaults event, are the tree's new settings.
	Defaults *Defaults `json:"defaults,omitempty"`
}

// Defaults are the tree-wide settings chosen at init and changed by
// `fencectl defaults` (a defaults event).
type Defaults struct {
	TTL         time.Duration `json:"ttl"`
	MaxAttempts int           `json:"max_attempts"`
	// RetryBackoff is the first backoff after a failed attempt (fail, or a
	// lease that expired): attempt n waits RetryBackoff·2^(n−1), at most
	// RetryBackoffMax, give or take a jitter. 0 (a tree made before
	// backoff): no backoff.
	RetryBackoff    time.Duration `json:"retry_backoff,omitempty"`
	RetryBackoffMax time.Duration `json:"retry_backoff_max,omitempty"`
}
