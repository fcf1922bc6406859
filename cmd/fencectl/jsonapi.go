package main

import (
	"encoding/json"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// The --json contract: one type per shape of output, each built from the
// domain's values by its new… function and marshalled as it is.
//
// The wire order of the keys is part of what scripts see, so it never
// changes: types born as maps (every result object) list their fields in
// alphabetical order of their json names, as a map marshals;
// noticeJSON, findingJSON, recoverJSON and errorObject keep the order
// they always had. TestJSON_FieldOrder holds both. Fields present in
// some outputs only are omitempty (or omitzero); every other field is
// always there, even when zero. TestJSON_DocExamples checks that every
// example in the README and docs decodes into one of these types with no
// unknown field.

// notices is embedded in every one-object result, at the place the key
// "notices" sorts to: what the command noticed on the way (see
// output.print), absent when nothing was.
type notices struct {
	Notices []noticeJSON `json:"notices,omitempty"`
}

func (n *notices) setNotices(ns []noticeJSON) { n.Notices = ns }

// noticeJSON is a side report: inside a result as "notices", or a line of
// its own after log's events and among run's summaries.
type noticeJSON struct {
	Notice string `json:"notice"`
	Name   string `json:"name"`
	Detail string `json:"detail"`
}

func newNotices(ns []fence.Notice) []noticeJSON { return convert(ns, newNotice) }

// convert maps each element of in with f; nil stays nil (null, or left
// out with omitempty).
func convert[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func newNotice(n fence.Notice) noticeJSON {
	return noticeJSON{Notice: string(n.Kind), Name: n.Name, Detail: n.Detail}
}

// leaseJSON is a task's current lease.
type leaseJSON struct {
	Agent     string    `json:"agent"`
	ClaimedAt time.Time `json:"claimed_at"`
	Deadline  time.Time `json:"deadline"`
	RequestID string    `json:"request_id,omitempty"`
	Token     uint64    `json:"token"`
}

func newLease(l *record.Lease) *leaseJSON {
	if l == nil {
		return nil
	}
	return &leaseJSON{Agent: l.Agent, ClaimedAt: l.ClaimedAt.UTC(), Deadline: l.Deadline.UTC(), RequestID: l.RequestID, Token: l.Token}
}

// lastLeaseJSON is how a task's latest lease ended.
type lastLeaseJSON struct {
	Agent   string    `json:"agent"`
	EndedAt time.Time `json:"ended_at"`
	EndedBy string    `json:"ended_by"`
	Reason  string    `json:"reason"`
	Token   uint64    `json:"token"`
}

func newLastLease(e *record.LeaseEnd) *lastLeaseJSON {
	if e == nil {
		return nil
	}
	return &lastLeaseJSON{Agent: e.Agent, EndedAt: e.At.UTC(), EndedBy: string(e.By), Reason: e.Reason, Token: e.Token}
}

// taskJSON is the task record: add and requeue print it; show, revoke,
// cancel and the fenced commands print it with more fields (showJSON,
// revokeJSON, cancelJSON, fencedJSON).
type taskJSON struct {
	After       []string       `json:"after,omitempty"` // the tasks it waits for (blocked while any)
	Attempts    int            `json:"attempts"`
	Blocked     bool           `json:"blocked,omitempty"`
	Created     time.Time      `json:"created"`
	Labels      []string       `json:"labels,omitempty"`
	LastLease   *lastLeaseJSON `json:"last_lease,omitempty"`
	Lease       *leaseJSON     `json:"lease,omitempty"`
	MaxAttempts int            `json:"max_attempts"`
	notices
	Path     string    `json:"path"`
	Priority int64     `json:"priority"`
	State    string    `json:"state"`
	Task     string    `json:"task"`
	Updated  time.Time `json:"updated"`
	Wait     *waitJSON `json:"wait,omitempty"` // a waiting task: why, and until when
}

// waitJSON says why a waiting task waits: kind blocked (after: the tasks
// it waits for), scheduled or backing_off (until: not before then;
// attempt: the failed attempt it backs off after); why says it in words,
// as show and list do.
type waitJSON struct {
	After   []string   `json:"after,omitempty"`
	Attempt int        `json:"attempt,omitempty"`
	Kind    string     `json:"kind"`
	Until   *time.Time `json:"until,omitempty"`
	Why     string     `json:"why"`
}

func newWait(t record.Task) *waitJSON {
	w, ok := fence.WaitOf(t)
	if !ok {
		return nil
	}
	j := &waitJSON{After: w.After, Attempt: w.Attempt, Kind: string(w.Kind), Why: w.String()}
	if !w.Until.IsZero() {
		u := w.Until.UTC()
		j.Until = &u
	}
	return j
}

func newTask(t record.Task, path string) *taskJSON {
	return &taskJSON{
		Wait:  newWait(t),
		After: t.After, Blocked: t.Blocked(), Labels: t.Labels,
		Attempts: t.Attempts, Created: t.Created.UTC(), LastLease: newLastLease(t.Last), Lease: newLease(t.Lease),
		MaxAttempts: t.MaxAttempts, Path: path, Priority: t.Priority, State: string(t.State), Task: t.ID, Updated: t.Updated.UTC(),
	}
}

// fencedJSON is the result of every token-checked command (heartbeat,
// verify, complete, release, fail, put): the task record, the token shown,
// whether the call was a retry, and the event it appended (none for a
// retry, nor for verify, which says current: true instead). put adds the
// output's name and the file written (path stays the task's file).
type fencedJSON struct {
	Attempts    int            `json:"attempts"`
	Created     time.Time      `json:"created"`
	Current     bool           `json:"current,omitempty"`
	Event       string         `json:"event,omitempty"`
	LastLease   *lastLeaseJSON `json:"last_lease,omitempty"`
	Lease       *leaseJSON     `json:"lease,omitempty"`
	MaxAttempts int            `json:"max_attempts"`
	// MovedOn, on a retry, says the task changed after the retried call
	// (claimed again, requeued…): the record is as it is now, without
	// anyone's lease.
	MovedOn bool   `json:"moved_on,omitempty"`
	Name    string `json:"name,omitempty"`
	notices
	Output   string    `json:"output,omitempty"`
	Path     string    `json:"path"`
	Priority int64     `json:"priority"`
	Retry    bool      `json:"retry"`
	State    string    `json:"state"`
	Task     string    `json:"task"`
	Token    uint64    `json:"token"`
	Updated  time.Time `json:"updated"`
}

// fencedAnswer is newFenced for the result of a fenced operation.
func fencedAnswer(res fence.Result, token uint64) *fencedJSON {
	j := newFenced(res.Task, res.Path, token, res.Retry, res.Event)
	j.MovedOn = res.MovedOn
	return j
}

func newFenced(t record.Task, path string, token uint64, retry bool, event *record.Event) *fencedJSON {
	r := newTask(t, path)
	f := &fencedJSON{
		Attempts: r.Attempts, Created: r.Created, LastLease: r.LastLease, Lease: r.Lease, MaxAttempts: r.MaxAttempts,
		Path: r.Path, Priority: r.Priority, Retry: retry, State: r.State, Task: r.Task, Token: token, Updated: r.Updated,
	}
	if event != nil {
		f.Event = string(event.Type)
	}
	return f
}

// showJSON is show's answer: the task record and its recent events.
type showJSON struct {
	After    []string    `json:"after,omitempty"`
	Attempts int         `json:"attempts"`
	Blocked  bool        `json:"blocked,omitempty"`
	Created  time.Time   `json:"created"`
	Events   []eventJSON `json:"events"`
	// Folded: compact folded the task's events up to this seq into its
	// record; events lists only the later ones.
	Folded      *foldedJSON    `json:"folded,omitempty"`
	Journal     journalJSON    `json:"journal"`
	Labels      []string       `json:"labels,omitempty"`
	LastLease   *lastLeaseJSON `json:"last_lease,omitempty"`
	Lease       *leaseJSON     `json:"lease,omitempty"`
	MaxAttempts int            `json:"max_attempts"`
	notices
	Path     string    `json:"path"`
	Priority int64     `json:"priority"`
	State    string    `json:"state"`
	Task     string    `json:"task"`
	Updated  time.Time `json:"updated"`
	Wait     *waitJSON `json:"wait,omitempty"`
	// WaitsFor explains After: each task and its state (and why, if it
	// failed: its dependents stay blocked until it is requeued and done).
	WaitsFor []waitsForJSON `json:"waits_for,omitempty"`
}

// foldedJSON says how much of a task's history compact folded.
type foldedJSON struct {
	ThroughSeq uint64 `json:"through_seq"`
}

type waitsForJSON struct {
	State string `json:"state"`
	Task  string `json:"task"`
	Why   string `json:"why,omitempty"`
}

func newShow(v fence.TaskView) *showJSON {
	r := newTask(v.Task, v.Path)
	var waits []waitsForJSON
	for _, d := range v.WaitsFor {
		waits = append(waits, waitsForJSON{State: string(d.State), Task: d.ID, Why: d.Why})
	}
	var folded *foldedJSON
	if v.FoldedTo != 0 {
		folded = &foldedJSON{ThroughSeq: v.FoldedTo}
	}
	return &showJSON{
		Folded: folded, After: r.After, Blocked: r.Blocked, Labels: r.Labels, WaitsFor: waits, Wait: r.Wait,
		Attempts: r.Attempts, Created: r.Created, Events: newEvents(v.Events), Journal: journalJSON(v.Journal), LastLease: r.LastLease, Lease: r.Lease,
		MaxAttempts: r.MaxAttempts, Path: r.Path, Priority: r.Priority, State: r.State, Task: r.Task, Updated: r.Updated,
	}
}

// revokeJSON is revoke's answer: the task record and the token it killed
// (0 if the task had no lease to revoke).
type revokeJSON struct {
	Attempts    int            `json:"attempts"`
	Created     time.Time      `json:"created"`
	LastLease   *lastLeaseJSON `json:"last_lease,omitempty"`
	Lease       *leaseJSON     `json:"lease,omitempty"`
	MaxAttempts int            `json:"max_attempts"`
	notices
	Path         string    `json:"path"`
	Priority     int64     `json:"priority"`
	RevokedToken uint64    `json:"revoked_token"`
	State        string    `json:"state"`
	Task         string    `json:"task"`
	Updated      time.Time `json:"updated"`
}

func newRevoke(t record.Task, path string, revoked uint64) *revokeJSON {
	r := newTask(t, path)
	return &revokeJSON{
		Attempts: r.Attempts, Created: r.Created, LastLease: r.LastLease, Lease: r.Lease, MaxAttempts: r.MaxAttempts,
		Path: r.Path, Priority: r.Priority, RevokedToken: revoked, State: r.State, Task: r.Task, Updated: r.Updated,
	}
}

// cancelJSON is cancel's answer: the task record, the token whose lease
// the cancel ended (0 if the task had none, and for a retry), and whether
// the call repeated a cancel already done (nothing changed).
type cancelJSON struct {
	Attempts       int            `json:"attempts"`
	CancelledToken uint64         `json:"cancelled_token"`
	Created        time.Time      `json:"created"`
	LastLease      *lastLeaseJSON `json:"last_lease,omitempty"`
	Lease          *leaseJSON     `json:"lease,omitempty"`
	MaxAttempts    int            `json:"max_attempts"`
	notices
	Path     string    `json:"path"`
	Priority int64     `json:"priority"`
	Retry    bool      `json:"retry"`
	State    string    `json:"state"`
	Task     string    `json:"task"`
	Updated  time.Time `json:"updated"`
}

func newCancel(t record.Task, path string, cancelled uint64, retry bool) *cancelJSON {
	r := newTask(t, path)
	return &cancelJSON{
		Attempts: r.Attempts, CancelledToken: cancelled, Created: r.Created, LastLease: r.LastLease, Lease: r.Lease,
		MaxAttempts: r.MaxAttempts, Path: r.Path, Priority: r.Priority, Retry: retry, State: r.State, Task: r.Task, Updated: r.Updated,
	}
}

// setJSON is set's answer: the task record as it is now, and whether
// there was nothing to change (retry: no event written).
type setJSON struct {
	After       []string       `json:"after,omitempty"`
	Attempts    int            `json:"attempts"`
	Blocked     bool           `json:"blocked,omitempty"`
	Created     time.Time      `json:"created"`
	Labels      []string       `json:"labels,omitempty"`
	LastLease   *lastLeaseJSON `json:"last_lease,omitempty"`
	MaxAttempts int            `json:"max_attempts"`
	notices
	Path     string    `json:"path"`
	Priority int64     `json:"priority"`
	Retry    bool      `json:"retry"`
	State    string    `json:"state"`
	Task     string    `json:"task"`
	Updated  time.Time `json:"updated"`
	Wait     *waitJSON `json:"wait,omitempty"`
}

func newSet(res fence.Result) *setJSON {
	r := newTask(res.Task, res.Path)
	return &setJSON{
		Wait:  r.Wait,
		After: r.After, Attempts: r.Attempts, Blocked: r.Blocked, Created: r.Created, Labels: r.Labels, LastLease: r.LastLease,
		MaxAttempts: r.MaxAttempts, Path: r.Path, Priority: r.Priority, Retry: res.Retry, State: r.State, Task: r.Task, Updated: r.Updated,
	}
}

// claimJSON is a claim (claim --json or --format json).
type claimJSON struct {
	Agent       string    `json:"agent"`
	Attempts    int       `json:"attempts"`
	Deadline    time.Time `json:"deadline"`
	MaxAttempts int       `json:"max_attempts"`
	notices
	Path     string `json:"path"`
	Priority int64  `json:"priority"`
	Renewed  bool   `json:"renewed"`
	Task     string `json:"task"`
	Token    uint64 `json:"token"`
}

func newClaim(res fence.ClaimResult) *claimJSON {
	return &claimJSON{
		Agent: res.Agent, Attempts: res.Task.Attempts, Deadline: res.Deadline.UTC(), MaxAttempts: res.Task.MaxAttempts,
		Path: res.Path, Priority: res.Task.Priority, Renewed: res.Renewed, Task: res.Task.ID, Token: res.Token,
	}
}

// statusJSON is status's answer: counts per state, the live leases, the
// newest token issued and the tree's defaults.
type statusJSON struct {
	Blocked            int               `json:"blocked"` // waiting tasks that wait for others (counted in waiting too)
	Counts             map[string]int    `json:"counts"`
	DefaultMaxAttempts int               `json:"default_max_attempts"`
	DefaultTTL         string            `json:"default_ttl"`
	Journal            journalJSON       `json:"journal"`
	LastToken          uint64            `json:"last_token"`
	Leases             []statusLeaseJSON `json:"leases"`
	notices
	Root string `json:"root"`
}

// journalJSON says which store holds a tree's journal (status, show):
// backend "bbolt" (where: the file) or "etcd" (where: the URL).
type journalJSON struct {
	Backend string `json:"backend"`
	Where   string `json:"where"`
}

// statusLeaseJSON is one live lease in status; expired ones (left_seconds
// ≤ 0) wait for the next claim or reap.
type statusLeaseJSON struct {
	Agent       string    `json:"agent"`
	Attempts    int       `json:"attempts"`
	Deadline    time.Time `json:"deadline"`
	Ended       string    `json:"ended,omitempty"` // "holder died", "holder died before starting it" or "host rebooted": over, to be reaped
	Expired     bool      `json:"expired"`
	LeftSeconds float64   `json:"left_seconds"`
	Task        string    `json:"task"`
	Token       uint64    `json:"token"`
}

func newStatus(st fence.Status) *statusJSON {
	leases := make([]statusLeaseJSON, 0, len(st.Leases))
	for _, l := range st.Leases {
		leases = append(leases, statusLeaseJSON{
			Agent: l.Agent, Attempts: l.Attempts, Deadline: l.Deadline.UTC(), Ended: l.Ended, Expired: l.Left <= 0,
			LeftSeconds: l.Left.Seconds(), Task: l.Task, Token: l.Token,
		})
	}
	return &statusJSON{
		Blocked: st.Blocked, Counts: stateCounts(st.Counts), DefaultMaxAttempts: st.Defaults.MaxAttempts, DefaultTTL: st.Defaults.TTL.String(), Journal: journalJSON(st.Journal),
		LastToken: st.LastToken, Leases: leases, Root: st.Root,
	}
}

// stateCounts keys counts by the state's name (nil stays nil: null).
func stateCounts(c map[record.State]int) map[string]int {
	if c == nil {
		return nil
	}
	out := make(map[string]int, len(c))
	for s, n := range c {
		out[string(s)] = n
	}
	return out
}

// initJSON is init's answer: the tree and the defaults it has.
type initJSON struct {
	Created     bool `json:"created"`
	MaxAttempts int  `json:"max_attempts"`
	notices
	Root string `json:"root"`
	TTL  string `json:"ttl"`
}

// reapJSON is reap's answer: the leases freed (or, with --dry-run, that
// would be).
type reapJSON struct {
	DryRun bool `json:"dry_run"`
	notices
	Reaped []reapedJSON `json:"reaped"`
}

// reapedJSON is one expired lease freed, and where its task went.
type reapedJSON struct {
	Attempts          int        `json:"attempts"`
	ExpiredFor        string     `json:"expired_for"`
	ExpiredForSeconds float64    `json:"expired_for_seconds"`
	Holder            string     `json:"holder"`
	MaxAttempts       int        `json:"max_attempts"`
	Reason            string     `json:"reason"` // "lease expired", "holder died" or "holder died before starting it"
	Task              string     `json:"task"`
	To                string     `json:"to"`
	Token             uint64     `json:"token"`
	Until             *time.Time `json:"until,omitempty"` // to waiting: the end of the backoff
}

func newReap(dryRun bool, rs []fence.Reaped) *reapJSON {
	list := make([]reapedJSON, 0, len(rs))
	for _, r := range rs {
		j := reapedJSON{
			Attempts: r.Attempts, ExpiredFor: r.ExpiredFor.String(), ExpiredForSeconds: r.ExpiredFor.Seconds(),
			Holder: r.Holder, MaxAttempts: r.MaxAttempts, Reason: r.Reason, Task: r.Task, To: string(r.To), Token: r.Token,
		}
		if !r.Until.IsZero() {
			u := r.Until.UTC()
			j.Until = &u
		}
		list = append(list, j)
	}
	return &reapJSON{DryRun: dryRun, Reaped: list}
}

// replayJSON is replay's answer: what the log holds, what disagreed, and
// how much is left (drift: every finding with --check, the unfixed ones
// without).
type replayJSON struct {
	Check    bool          `json:"check"`
	Drift    int           `json:"drift"`
	Events   int           `json:"events"`
	Findings []findingJSON `json:"findings"`
	notices
	Tasks int `json:"tasks"`
	// TokensAbove: with --restored, new tokens start above it.
	TokensAbove uint64 `json:"tokens_above,omitempty"`
}

// findingJSON is one disagreement between the log, the records and the
// tree (replay, recover).
type findingJSON struct {
	Kind   string `json:"kind"`
	Task   string `json:"task,omitempty"`
	Dir    string `json:"dir,omitempty"`
	Detail string `json:"detail"`
	Fixed  bool   `json:"fixed"`
}

// newFindings converts findings; nil stays nil (null, or left out).
func newFindings(fs []fence.Finding) []findingJSON {
	return convert(fs, func(f fence.Finding) findingJSON {
		return findingJSON{Kind: string(f.Kind), Task: f.Task, Dir: string(f.Dir), Detail: f.Detail, Fixed: f.Fixed}
	})
}

// recoverJSON is recover's answer: the new journal's counts, the tasks
// freed from claimed/ and released from waiting/, where the damaged
// journal went and the floor of every new token.
type recoverJSON struct {
	Root       string         `json:"root"`
	KeptAside  string         `json:"kept_aside,omitempty"`
	Counts     map[string]int `json:"counts"`
	Freed      []string       `json:"freed"`
	Released   []string       `json:"released"` // found in waiting/, now available
	FirstToken uint64         `json:"first_token"`
	Findings   []findingJSON  `json:"findings"`
	// Unfinished: the journal set aside was one an earlier recover, cut
	// short, was rebuilding.
	Unfinished bool `json:"unfinished,omitempty"`
	// Defaults are the new journal's; kept says they are the old one's
	// (else recover's --ttl and --max-attempts).
	Defaults recoverDefaultsJSON `json:"defaults"`
	notices
}

type recoverDefaultsJSON struct {
	Kept        bool   `json:"kept"`
	MaxAttempts int    `json:"max_attempts"`
	TTL         string `json:"ttl"`
}

func newRecover(rep fence.RecoverReport) *recoverJSON {
	return &recoverJSON{
		Defaults: recoverDefaultsJSON{Kept: rep.DefaultsKept, MaxAttempts: rep.Defaults.MaxAttempts, TTL: rep.Defaults.TTL.String()},
		Root:     rep.Root, KeptAside: rep.KeptAside, Counts: stateCounts(rep.Counts), Freed: rep.Freed,
		Released: rep.Released, FirstToken: rep.FirstToken, Findings: newFindings(rep.Findings),
		Unfinished: rep.Unfinished,
	}
}

// eventJSON is one event of the audit trail (log, one per line; show's
// events).
type eventJSON struct {
	After     []string           `json:"after,omitempty"`
	Agent     string             `json:"agent,omitempty"`
	Deadline  *time.Time         `json:"deadline,omitempty"`
	Defaults  *eventDefaultsJSON `json:"defaults,omitempty"` // defaults: the tree's new settings
	From      string             `json:"from,omitempty"`
	Labels    []string           `json:"labels,omitempty"`
	NotBefore *time.Time         `json:"not_before,omitempty"` // add, fail, reap, dep_done: not claimable before then
	Priority  *int64             `json:"priority,omitempty"`   // set: the new priority
	Reason    string             `json:"reason,omitempty"`
	Seq       uint64             `json:"seq"`
	Task      string             `json:"task"`
	Time      time.Time          `json:"time"`
	To        string             `json:"to"`
	Token     uint64             `json:"token,omitempty"`
	Type      string             `json:"type"`
}

// eventDefaultsJSON is what a defaults event set (retry_backoff_max 0s:
// the default cap).
type eventDefaultsJSON struct {
	MaxAttempts     int    `json:"max_attempts"`
	RetryBackoff    string `json:"retry_backoff"`
	RetryBackoffMax string `json:"retry_backoff_max"`
	TTL             string `json:"ttl"`
}

// newEvents converts events; never nil, so that show prints [].
func newEvents(evs []record.Event) []eventJSON {
	out := make([]eventJSON, 0, len(evs))
	for _, e := range evs {
		j := eventJSON{
			After: e.After, Labels: e.Labels,
			Agent: e.Agent, From: string(e.From), Reason: e.Reason, Seq: e.Seq, Task: e.Task,
			Time: e.Time.UTC(), To: string(e.To), Token: e.Token, Type: string(e.Type),
		}
		if e.Deadline != nil {
			d := e.Deadline.UTC()
			j.Deadline = &d
		}
		if e.Type == record.EvSet {
			p := e.Priority
			j.Priority = &p
		}
		if !e.NotBefore.IsZero() {
			nb := e.NotBefore.UTC()
			j.NotBefore = &nb
		}
		if d := e.Defaults; d != nil {
			j.Defaults = &eventDefaultsJSON{MaxAttempts: d.MaxAttempts, RetryBackoff: d.RetryBackoff.String(), RetryBackoffMax: d.RetryBackoffMax.String(), TTL: d.TTL.String()}
		}
		out = append(out, j)
	}
	return out
}

// runJSON is run's summary of one supervised task, on stderr (stdout is
// CMD's); inside an error object as "run" when the task ended in an
// error.
type runJSON struct {
	Containment string `json:"containment"`
	ExitCode    int    `json:"exit_code"`
	notices
	Outcome string  `json:"outcome"`
	Seconds float64 `json:"seconds"`
	Task    string  `json:"task"`
	Token   uint64  `json:"token"`
}

// errorObject is the --json shape of every error: exactly one on stderr.
// A token refusal always names holder and held_since, as null when
// nobody holds the task, so scripts can tell "nobody" from "field
// missing"; the current holder's token is never part of a refusal.
type errorObject struct {
	Code      int                 `json:"code"`
	Reason    string              `json:"reason"`
	Message   string              `json:"message"`
	Rule      string              `json:"rule,omitempty"` // invalid_input: the rule broken (fence.Rule)
	Task      string              `json:"task,omitempty"`
	YourToken uint64              `json:"your_token,omitempty"`
	Holder    nullable[string]    `json:"holder,omitzero"`
	HeldSince nullable[time.Time] `json:"held_since,omitzero"`
	State     string              `json:"state,omitempty"`
	WaitsFor  []string            `json:"waits_for,omitempty"`  // blocked: the tasks it still waits for
	NotBefore *time.Time          `json:"not_before,omitempty"` // scheduled, backing off: not claimable before then
	Attempt   int                 `json:"attempt,omitempty"`    // backing off: after which failed attempt
	LostAt    *time.Time          `json:"lost_at,omitempty"`
	LostBy    string              `json:"lost_by,omitempty"`
	Run       *runJSON            `json:"run,omitempty"`
	Failed    []errorObject       `json:"failed,omitempty"` // a batch claim refused: why, per task
	Notices   []noticeJSON        `json:"notices,omitempty"`
}

// nullable is a field that some objects leave out (its zero value, with
// omitzero) and others name, with a value or as null.
type nullable[T any] struct {
	named bool
	val   *T
}

func null[T any]() nullable[T]     { return nullable[T]{named: true} }
func value[T any](v T) nullable[T] { return nullable[T]{named: true, val: &v} }

func (n nullable[T]) IsZero() bool { return !n.named }

func (n nullable[T]) MarshalJSON() ([]byte, error) {
	if n.val == nil {
		return []byte("null"), nil
	}
	return json.Marshal(*n.val)
}

func (n *nullable[T]) UnmarshalJSON(b []byte) error {
	n.named, n.val = true, nil
	if string(b) == "null" {
		return nil
	}
	n.val = new(T)
	return json.Unmarshal(b, n.val)
}
