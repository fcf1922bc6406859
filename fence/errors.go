package fence

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencectl/fencectl/journal/record"
)

// Reasons are the stable, machine-readable names of every refusal and
// failure. Scripts match on these, never on messages.
const (
	ReasonStaleToken     = "stale_token"
	ReasonLeaseExpired   = "lease_expired"
	ReasonNotHeld        = "not_held"
	ReasonNotAvailable   = "not_available"
	ReasonBlocked        = "blocked"     // not_available because the task waits for others (exit 4)
	ReasonScheduled      = "scheduled"   // not_available because the task waits for the time it is scheduled for (exit 4)
	ReasonBackingOff     = "backing_off" // not_available because the task backs off after a failed attempt (exit 4)
	ReasonNothingToClaim = "nothing_to_claim"
	ReasonBusy           = "busy"
	ReasonNoSuchTask     = "no_such_task"
	ReasonInvalidInput   = "invalid_input"
	ReasonIOError        = "io_error"
	ReasonCorruptJournal = "corrupt_journal"
	ReasonJournalVersion = "journal_version" // written by another (newer) fencectl: not damaged
	ReasonDrift          = "drift"
	ReasonNotOwner       = "not_owner" // root refused a write to a tree another user owns (exit 1)
)

// StaleTokenError is the refusal every fenced call gives a token that does
// not authorise it: stale (its lease ended), expired (the deadline passed,
// not yet reaped) or not held (never issued, or issued for another task).
// Nothing changed when it is returned.
//
// Current is for the library's own checks and tests only: it is never
// shown to whoever was refused (Error leaves it out, and so do the CLI,
// MCP and encoding/json), since an agent told "stale, current token N"
// may retry with N. The refusal names the holder and since when instead.
// A program that hands refusals on to its agents must not pass Current.
type StaleTokenError struct {
	Reason    string       // ReasonStaleToken, ReasonLeaseExpired or ReasonNotHeld
	Task      string       // the task the caller named
	Yours     uint64       // the token the caller showed
	Current   uint64       `json:"-"` // the task's current token, 0 if no lease; never shown
	Holder    string       // the current lease's agent, "" if none
	HeldSince time.Time    // when the current lease was claimed (zero if none)
	State     record.State // the task's state now
	LostAt    time.Time    // when Yours stopped authorising (zero if never did)
	LostBy    string       // how: reaped, revoked, cancelled, completed, released, failed, expired, LostByRestore
	// ReapedFirst says the refused claim reaped expired leases before it
	// was refused (a claim always does): those reaps stand.
	ReapedFirst bool
}

func (e *StaleTokenError) Error() string {
	if e.Task == "" {
		return fmt.Sprintf("token %d was never issued by this journal; nothing changed", e.Yours)
	}
	var b strings.Builder
	switch e.Reason {
	case ReasonLeaseExpired:
		fmt.Fprintf(&b, "task %s: lease of token %d expired at %s", e.Task, e.Yours, fmtTime(e.LostAt))
	case ReasonStaleToken:
		fmt.Fprintf(&b, "task %s: token %d is stale: lease %s at %s", e.Task, e.Yours, e.LostBy, fmtTime(e.LostAt))
		if e.LostBy == LostByRestore {
			b.WriteString(" (the journal was found restored from a backup: every lease it held was ended)")
		}
	default:
		fmt.Fprintf(&b, "task %s: token %d does not hold this task", e.Task, e.Yours)
	}
	switch {
	case e.Current != 0 && e.Current == e.Yours: // its own lease, expired
		b.WriteString("; not reaped yet, but no longer yours")
	case e.Current != 0:
		fmt.Fprintf(&b, "; held by %s since %s", e.Holder, fmtTime(e.HeldSince))
	default:
		fmt.Fprintf(&b, "; task is %s", e.State)
	}
	if e.ReapedFirst {
		b.WriteString("; nothing else changed (the expired leases this claim found were reaped first, as every claim does)")
	} else {
		b.WriteString("; nothing changed")
	}
	return b.String()
}

// NotAvailableError means the named task exists but is not in a state the
// operation applies to (claim of a claimed task, requeue of an available
// one, revoke of an unclaimed one, cancel of a finished one).
type NotAvailableError struct {
	Task  string
	State record.State
	Op    string
	// WaitsFor, for a claim of a blocked task, lists the tasks it still
	// waits for (its After).
	WaitsFor []string
	// Wait, for a claim of a waiting task, says what it waits for.
	Wait *Wait
}

// Blocked reports whether the task was refused because it waits for
// other tasks.
func (e *NotAvailableError) Blocked() bool { return len(e.WaitsFor) > 0 }

func (e *NotAvailableError) Error() string {
	if e.Blocked() {
		return fmt.Sprintf("task %s is blocked: it waits for %s, not done yet", e.Task, strings.Join(e.WaitsFor, ", "))
	}
	if e.Op == "claim" && e.Wait != nil {
		return fmt.Sprintf("task %s is waiting: %s", e.Task, e.Wait)
	}
	switch e.Op {
	case "set":
		if e.State == record.Claimed {
			return fmt.Sprintf("task %s is claimed: release it (or revoke the lease) before changing it", e.Task)
		}
		return fmt.Sprintf("task %s is %s: it finished, nothing to change (requeue it first)", e.Task, e.State)
	case "revoke":
		return fmt.Sprintf("task %s is %s, not claimed: nothing to revoke", e.Task, e.State)
	case "requeue":
		return fmt.Sprintf("task %s is %s: only done or failed tasks can be requeued", e.Task, e.State)
	case "cancel":
		return fmt.Sprintf("task %s is %s: it already finished, nothing to cancel", e.Task, e.State)
	}
	return fmt.Sprintf("task %s is %s, not available", e.Task, e.State)
}

// ErrNothingToClaim means no task is ready.
var ErrNothingToClaim = errors.New("nothing to claim: no task is available")

// NoSuchTaskError names a task id the journal does not know.
type NoSuchTaskError struct {
	Task string
	// For, if set, is the task that was to wait for Task (add --after):
	// the message says which of the two is unknown.
	For string
}

func (e *NoSuchTaskError) Error() string {
	if e.For != "" {
		return fmt.Sprintf("no such task %q, which %s was to wait for: add it first, or leave it out", e.Task, e.For)
	}
	return fmt.Sprintf("no such task %q", e.Task)
}

// InvalidInputError is bad input that a retry cannot fix: an invalid id, a
// duplicate id, a bad option value. It says which input, which rule and
// which value, in the domain's words; a caller words it in its own (the
// CLI names the flag that set the input and adds what to do next).
type InvalidInputError struct {
	Input Input // which input; "" when no single one is to blame
	Rule  Rule  // which rule it breaks
	Value any   // the value given (string, number or duration); nil when not shown
	// Want is what the rule asks ("must be at least 1"): the error reads
	// "invalid INPUT VALUE: WANT", or "missing INPUT: WANT".
	Want string
	// Msg, when set, is the whole sentence instead, for a refusal of
	// another shape (a duplicate id, a directory that is not a tree).
	Msg string
}

// Input names an input of the domain in an InvalidInputError.
type Input string

// The inputs an InvalidInputError can name.
const (
	InputTTL         Input = "ttl"           // a lease length
	InputMaxAttempts Input = "max_attempts"  // attempts before failed/
	InputWait        Input = "wait"          // how long a claim keeps trying
	InputLimit       Input = "limit"         // how many events Log or tasks List returns
	InputState       Input = "state"         // a task state to select (List)
	InputAfter       Input = "after"         // a listing's cursor: the id a page starts after
	InputRequestID   Input = "request_id"    // a claim's idempotency key
	InputToken       Input = "token"         // a fencing token
	InputID          Input = "id"            // a task id
	InputBatch       Input = "batch"         // how many tasks a batch claim takes
	InputOutputName  Input = "output_name"   // the name of a fenced output
	InputRoot        Input = "root"          // the task tree's directory
	InputJournal     Input = "journal"       // where a tree's journal is (init --journal)
	InputDeps        Input = "dependency"    // a task another waits for (add/set --after)
	InputLabel       Input = "label"         // a task's label
	InputSchedule    Input = "schedule"      // when a task may first be claimed (add --not-before, --delay)
	InputBackoff     Input = "retry_backoff" // the backoff after a failed attempt (init, defaults)
	InputBefore      Input = "before"        // how long ago a task must have finished to be compacted
)

// Rule names the rule an input breaks in an InvalidInputError.
type Rule string

// The rules an InvalidInputError can name.
const (
	RuleMissing      Rule = "missing"       // required and not given
	RuleRange        Rule = "range"         // a number or duration out of bounds
	RuleFormat       Rule = "format"        // a text that breaks its syntax or length
	RuleExists       Rule = "exists"        // the journal already has a task with this id
	RuleUnknownFile  Rule = "unknown_file"  // a file with this id is in the tree, unknown to the journal
	RuleNoTree       Rule = "no_tree"       // the root does not exist
	RuleNotATree     Rule = "not_a_tree"    // the root is a directory but no task tree
	RuleOrphanTasks  Rule = "orphan_tasks"  // the root holds task files but no journal
	RuleInsideTree   Rule = "inside_tree"   // the root is a directory of another tree (enclosing.go)
	RuleConflict     Rule = "conflict"      // contradicts what is already held or asked
	RuleSharedPrefix Rule = "shared_prefix" // the etcd prefix holds another tree's journal
	RuleNetworkFS    Rule = "network_fs"    // a bbolt journal on a file system other hosts may reach
	RuleCycle        Rule = "cycle"         // dependencies that would wait for each other
)

func (e *InvalidInputError) Error() string {
	return e.Describe(strings.ReplaceAll(string(e.Input), "_", " "))
}

// Describe is the error's sentence with the input called name: the CLI
// passes the flag that set it. A Msg is returned as it is.
func (e *InvalidInputError) Describe(name string) string {
	if e.Msg != "" {
		return e.Msg
	}
	var b strings.Builder
	if e.Rule == RuleMissing {
		b.WriteString("missing " + name)
	} else {
		b.WriteString("invalid " + name)
		switch v := e.Value.(type) {
		case nil:
		case string:
			fmt.Fprintf(&b, " %q", v)
		default:
			fmt.Fprintf(&b, " %v", v)
		}
	}
	if e.Want != "" {
		b.WriteString(": " + e.Want)
	}
	return b.String()
}

// invalidValue is value v of input in breaking rule; want says what the
// rule asks.
func invalidValue(in Input, rule Rule, v any, want string) error {
	return &InvalidInputError{Input: in, Rule: rule, Value: v, Want: want}
}

// invalidf is a refusal worded as a whole sentence.
func invalidf(in Input, rule Rule, v any, format string, args ...any) error {
	return &InvalidInputError{Input: in, Rule: rule, Value: v, Msg: fmt.Sprintf(format, args...)}
}

// TaskFileError refuses an action on a task whose file is missing or is
// not a regular file where the journal says it is. Nothing changed.
// Problem says which, so that a caller can say what to do about it.
type TaskFileError struct {
	Problem TaskFileProblem
	Err     error
}

// TaskFileProblem is what is wrong with a task's file.
type TaskFileProblem int

// The problems a TaskFileError names.
const (
	FileOther      TaskFileProblem = iota // see Err
	FileNotRegular                        // a symlink, FIFO or directory where the file should be
	FileMissing                           // no file where the journal says it is
)

func (e *TaskFileError) Error() string { return e.Err.Error() }
func (e *TaskFileError) Unwrap() error { return e.Err }

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}

// AfterCommitError is the failure of what follows a commit (a task's file
// moved, an output published, a directory synced) for a change the
// journal holds: the step happened, and the caller must hear that as well
// as what is behind, or it would redo work that was taken (an agent told
// "no space left" after its complete was recorded).
type AfterCommitError struct {
	Err error
	// Instead, if set, replaces the advice after Err (an add, whose
	// repeat is refused rather than answered as done).
	Instead string
}

func (e *AfterCommitError) Error() string {
	if e.Instead != "" {
		return fmt.Sprintf("%v; %s", e.Err, e.Instead)
	}
	return fmt.Sprintf("%v; the change itself is recorded (the journal has it: repeating the command answers that it was done), and the next command on the tree, or fencectl replay, finishes what is left", e.Err)
}

func (e *AfterCommitError) Unwrap() error { return e.Err }

// ClaimUndoneError says a claim was made and then undone because its
// token could not reach the caller (UndoClaim): nothing is held.
type ClaimUndoneError struct {
	Task       string
	Token      uint64
	Why        error
	ReleaseErr error // the undo failed: the lease stays until its TTL
}

func (e *ClaimUndoneError) Error() string {
	if e.ReleaseErr != nil {
		return fmt.Sprintf("claimed %s (token %d), but %v; releasing it failed too (%v): its lease ends at its TTL", e.Task, e.Token, e.Why, e.ReleaseErr)
	}
	return fmt.Sprintf("claimed %s, but %v; the claim was released at once: nothing is held, the task is claimable again", e.Task, e.Why)
}

func (e *ClaimUndoneError) Unwrap() error { return e.Why }
