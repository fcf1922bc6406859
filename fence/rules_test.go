package fence_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// The pure rules are tested without a disk: records and claims are built by
// hand, and the time is an argument.

var (
	base     = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	deadline = base.Add(time.Minute) // the current lease's deadline
	lostAt   = base.Add(-time.Minute)
)

const (
	curToken   = uint64(200) // the task's current token, held by agent "a"
	oldToken   = uint64(100) // an earlier claim of the same task, by agent "old"
	otherToken = uint64(300) // a claim of another task, t2
	neverToken = uint64(999) // never issued
)

func heldTask() record.Task {
	return record.Task{
		ID: "t1", State: record.Claimed, MaxAttempts: 3, Seq: 1, Created: base.Add(-time.Hour), Updated: base,
		Lease: &record.Lease{Token: curToken, Agent: "a", ClaimedAt: base, Deadline: deadline},
	}
}

// heldSince is when heldTask's lease was claimed, if cur is its token.
func heldSince(cur uint64) time.Time {
	if cur == 0 {
		return time.Time{}
	}
	return base
}

func freeTask(s record.State) record.Task {
	return record.Task{ID: "t1", State: s, MaxAttempts: 3, Seq: 1, Created: base.Add(-time.Hour), Updated: base}
}

func endedClaim(token uint64, task string, by record.EventType) *record.Claim {
	return &record.Claim{Token: token, Task: task, Agent: "old", At: base.Add(-time.Hour),
		Ended: &record.LeaseEnd{Token: token, Agent: "old", At: lostAt, By: by}}
}

// tokenCase is one token shown for task t1: the task as the journal has it,
// what the journal remembers of the token, and the time of the call.
type tokenCase struct {
	name  string
	task  record.Task
	token uint64
	claim *record.Claim
	now   time.Time
	// want is the refusal (nil: authorised). endedBy is the call that ended
	// the token's lease on this task, whose repeat is a retry.
	want    *fence.StaleTokenError
	endedBy record.EventType
}

func tokenCases() []tokenCase {
	cur := &record.Claim{Token: curToken, Task: "t1", Agent: "a", At: base}
	stale := func(s record.State, cur uint64, holder, by string) *fence.StaleTokenError {
		return &fence.StaleTokenError{Reason: fence.ReasonStaleToken, Task: "t1", Yours: oldToken,
			Current: cur, Holder: holder, HeldSince: heldSince(cur), State: s, LostAt: lostAt, LostBy: by}
	}
	notHeld := func(tok uint64, s record.State, cur uint64, holder string) *fence.StaleTokenError {
		return &fence.StaleTokenError{Reason: fence.ReasonNotHeld, Task: "t1", Yours: tok, Current: cur, Holder: holder, HeldSince: heldSince(cur), State: s}
	}
	expired := &fence.StaleTokenError{Reason: fence.ReasonLeaseExpired, Task: "t1", Yours: curToken,
		Current: curToken, Holder: "a", HeldSince: base, State: record.Claimed, LostAt: deadline, LostBy: "expired"}
	cases := []tokenCase{
		{name: "current", task: heldTask(), token: curToken, claim: cur, now: base},
		{name: "current/just-before-deadline", task: heldTask(), token: curToken, claim: cur, now: deadline.Add(-time.Nanosecond)},
		{name: "current/claim-record-names-another-agent", task: heldTask(), token: curToken,
			claim: &record.Claim{Token: curToken, Task: "t1", Agent: "someone-else", At: base}, now: base},
		{name: "current/no-claim-record", task: heldTask(), token: curToken, claim: nil, now: base},
		{name: "expired/at-deadline", task: heldTask(), token: curToken, claim: cur, now: deadline, want: expired},
		{name: "expired/after-deadline", task: heldTask(), token: curToken, claim: cur, now: deadline.Add(time.Hour), want: expired},
		{name: "another-claims-token/task-held", task: heldTask(), token: otherToken,
			claim: &record.Claim{Token: otherToken, Task: "t2", Agent: "b", At: base}, now: base,
			want: notHeld(otherToken, record.Claimed, curToken, "a")},
		{name: "another-claims-token/ended-by-complete", task: heldTask(), token: otherToken,
			claim: endedClaim(otherToken, "t2", record.EvComplete), now: base,
			want: notHeld(otherToken, record.Claimed, curToken, "a")},
		{name: "another-claims-token/task-available", task: freeTask(record.Available), token: otherToken,
			claim: &record.Claim{Token: otherToken, Task: "t2", Agent: "b", At: base}, now: base,
			want: notHeld(otherToken, record.Available, 0, "")},
		{name: "never-issued/task-held", task: heldTask(), token: neverToken, now: base,
			want: notHeld(neverToken, record.Claimed, curToken, "a")},
		{name: "never-issued/task-available", task: freeTask(record.Available), token: neverToken, now: base,
			want: notHeld(neverToken, record.Available, 0, "")},
		{name: "never-issued/task-done", task: freeTask(record.Done), token: neverToken, now: base,
			want: notHeld(neverToken, record.Done, 0, "")},
	}
	// Stale: the lease ended by each way a lease can end; the task is where
	// that end left it, or claimed again by someone else since.
	ends := []struct {
		by    record.EventType
		lost  string
		state record.State
	}{
		{record.EvReap, "reaped", record.Available},
		{record.EvReap, "reaped", record.Failed},
		{record.EvRevoke, "revoked", record.Available},
		{record.EvCancel, "cancelled", record.Failed},
		{record.EvComplete, "completed", record.Done},
		{record.EvRelease, "released", record.Available},
		{record.EvFail, "failed", record.Available},
		{record.EvFail, "failed", record.Failed},
	}
	for _, e := range ends {
		retry := e.by
		if e.by == record.EvReap || e.by == record.EvRevoke || e.by == record.EvCancel {
			retry = "" // nobody's call: no retry
		}
		cases = append(cases,
			tokenCase{name: fmt.Sprintf("stale/%s/task-%s", e.by, e.state), task: freeTask(e.state), token: oldToken,
				claim: endedClaim(oldToken, "t1", e.by), now: base, endedBy: retry,
				want: stale(e.state, 0, "", e.lost)},
			tokenCase{name: fmt.Sprintf("stale/%s-then-reclaimed", e.by), task: heldTask(), token: oldToken,
				claim: endedClaim(oldToken, "t1", e.by), now: base, endedBy: retry,
				want: stale(record.Claimed, curToken, "a", e.lost)},
			// The current holder's lease having expired changes nothing
			// for a stale token: still stale, not "expired".
			tokenCase{name: fmt.Sprintf("stale/%s-then-reclaimed-and-expired", e.by), task: heldTask(), token: oldToken,
				claim: endedClaim(oldToken, "t1", e.by), now: deadline.Add(time.Second), endedBy: retry,
				want: stale(record.Claimed, curToken, "a", e.lost)},
		)
	}
	return cases
}

// decide is what a fenced call does with the rules: a repeat of the call
// that ended the token's lease is a retry, anything else must be authorised.
// verify and claim --token never retry.
func decide(op string, tc tokenCase) (retry bool, err error) {
	switch op {
	case "heartbeat", "complete", "release", "fail":
		if fence.IsRetry(record.EventType(op), tc.task, tc.claim) {
			return true, nil
		}
	}
	return false, fence.Authorize(tc.task, tc.token, tc.claim, tc.now)
}

func TestRules_AuthorizeEveryTransition(t *testing.T) {
	ops := []string{"heartbeat", "complete", "release", "fail", "verify", "claim-token"}
	for _, tc := range tokenCases() {
		for _, op := range ops {
			t.Run(tc.name+"/"+op, func(t *testing.T) {
				retry, err := decide(op, tc)
				wantRetry := tc.endedBy != "" && string(tc.endedBy) == op
				if retry != wantRetry {
					t.Fatalf("retry = %v, want %v", retry, wantRetry)
				}
				if wantRetry {
					return
				}
				if tc.want == nil {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				var se *fence.StaleTokenError
				if !errors.As(err, &se) {
					t.Fatalf("err = %v (%T), want *StaleTokenError", err, err)
				}
				if !reflect.DeepEqual(*se, *tc.want) {
					t.Errorf("StaleTokenError =\n  %+v\nwant\n  %+v", *se, *tc.want)
				}
				msg := se.Error()
				if !strings.Contains(msg, "t1") || !strings.Contains(msg, fmt.Sprint(tc.token)) || !strings.Contains(msg, "nothing changed") {
					t.Errorf("message %q does not name the task, the token and that nothing changed", msg)
				}
			})
		}
	}
}

func TestRules_AuthorizeDoesNotMutate(t *testing.T) {
	task := heldTask()
	claim := endedClaim(oldToken, "t1", record.EvRevoke)
	before := task
	beforeLease := *task.Lease
	beforeClaim := *claim
	_ = fence.Authorize(task, oldToken, claim, deadline.Add(time.Hour))
	_ = fence.Authorize(task, curToken, nil, deadline.Add(time.Hour))
	if !reflect.DeepEqual(task, before) || *task.Lease != beforeLease || !reflect.DeepEqual(*claim, beforeClaim) {
		t.Errorf("Authorize changed its arguments")
	}
}

func TestRules_IsRetry(t *testing.T) {
	all := []record.EventType{record.EvHeartbeat, record.EvComplete, record.EvRelease, record.EvFail, record.EvReap, record.EvRevoke, record.EvClaim, record.EvRequeue}
	for _, ended := range []record.EventType{record.EvComplete, record.EvRelease, record.EvFail, record.EvReap, record.EvRevoke} {
		for _, op := range all {
			t.Run(fmt.Sprintf("ended-by-%s/%s", ended, op), func(t *testing.T) {
				got := fence.IsRetry(op, freeTask(record.Available), endedClaim(oldToken, "t1", ended))
				if want := op == ended; got != want {
					t.Errorf("IsRetry = %v, want %v (only the very call that ended the lease is a retry)", got, want)
				}
			})
		}
	}
	for _, tc := range []struct {
		name  string
		op    record.EventType
		task  record.Task
		claim *record.Claim
	}{
		{"never-issued", record.EvComplete, freeTask(record.Done), nil},
		{"lease-not-ended", record.EvComplete, heldTask(), &record.Claim{Token: curToken, Task: "t1", Agent: "a", At: base}},
		{"another-tasks-claim-ended-by-the-same-call", record.EvComplete, freeTask(record.Done), endedClaim(otherToken, "t2", record.EvComplete)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if fence.IsRetry(tc.op, tc.task, tc.claim) {
				t.Errorf("IsRetry = true, want false")
			}
		})
	}
}

func TestRules_Expired(t *testing.T) {
	l := record.Lease{Token: 1, Agent: "a", ClaimedAt: base, Deadline: deadline}
	for _, tc := range []struct {
		now  time.Time
		want bool
	}{
		{base, false},
		{deadline.Add(-time.Nanosecond), false},
		{deadline, true}, // at the deadline the lease is gone
		{deadline.Add(time.Nanosecond), true},
		{deadline.Add(24 * time.Hour), true},
		{deadline.In(time.FixedZone("x", 3600)), true}, // same instant, other zone
	} {
		if got := fence.Expired(l, tc.now); got != tc.want {
			t.Errorf("Expired at deadline%+v = %v, want %v", tc.now.Sub(deadline), got, tc.want)
		}
	}
}

func evAt(seq uint64, typ record.EventType, from, to record.State, offset time.Duration) record.Event {
	return record.Event{Seq: seq, Time: base.Add(offset), Type: typ, Task: "t1", From: from, To: to}
}

func TestRules_ApplyCreates(t *testing.T) {
	for _, typ := range []record.EventType{record.EvAdd, record.EvAdopt} {
		t.Run(string(typ), func(t *testing.T) {
			ev := record.Event{Seq: 7, Time: base, Type: typ, Task: "t1", To: record.Available, Priority: -4, MaxAttempts: 5, Source: "inbox", Staged: "x"}
			got, err := fence.Apply(nil, ev)
			if err != nil {
				t.Fatal(err)
			}
			want := record.Task{ID: "t1", State: record.Available, Priority: -4, MaxAttempts: 5, Seq: 7, Created: base, Updated: base}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Apply(nil, %s) =\n  %+v\nwant\n  %+v", typ, got, want)
			}
			// A second add of the same task is an error.
			if _, err := fence.Apply(&got, ev); err == nil {
				t.Errorf("Apply of %s to an existing task: no error", typ)
			}
		})
	}
}

func TestRules_ApplyTransitions(t *testing.T) {
	held := heldTask()
	held.Attempts = 1
	newDeadline := base.Add(time.Hour)
	withLast := func(rec record.Task, by record.EventType, reason string, at time.Time) record.Task {
		rec.Last = &record.LeaseEnd{Token: curToken, Agent: "a", At: at, By: by, Reason: reason}
		rec.Lease = nil
		return rec
	}
	type tc struct {
		name string
		prev record.Task
		ev   record.Event
		want func(record.Task) record.Task // from prev
	}
	at := base.Add(5 * time.Second)
	end := func(typ record.EventType, to record.State, attempts int) tc {
		ev := evAt(9, typ, record.Claimed, to, 5*time.Second)
		ev.Token, ev.Agent, ev.Reason = curToken, "someone", "why"
		return tc{name: fmt.Sprintf("%s-to-%s", typ, to), prev: held, ev: ev, want: func(p record.Task) record.Task {
			p = withLast(p, typ, "why", at)
			p.State, p.Attempts, p.Updated = to, attempts, at
			return p
		}}
	}
	cases := []tc{
		{name: "claim", prev: freeTask(record.Available), ev: func() record.Event {
			e := evAt(9, record.EvClaim, record.Available, record.Claimed, 5*time.Second)
			e.Token, e.Agent, e.Deadline, e.RequestID = 555, "b", &newDeadline, "req"
			return e
		}(), want: func(p record.Task) record.Task {
			p.State, p.Updated = record.Claimed, at
			// The lease remembers the length the claim asked for.
			p.Lease = &record.Lease{Token: 555, Agent: "b", ClaimedAt: at, Deadline: newDeadline, TTL: newDeadline.Sub(at), RequestID: "req"}
			return p
		}},
		{name: "heartbeat", prev: held, ev: func() record.Event {
			e := evAt(9, record.EvHeartbeat, record.Claimed, record.Claimed, 5*time.Second)
			e.Token, e.Agent, e.Deadline = curToken, "another-agent", &newDeadline
			return e
		}(), want: func(p record.Task) record.Task {
			l := *p.Lease
			l.Deadline = newDeadline // token and holder unchanged
			p.Lease, p.Updated = &l, at
			return p
		}},
		end(record.EvComplete, record.Done, 1),
		end(record.EvRelease, record.Available, 1), // no attempt
		end(record.EvRevoke, record.Available, 1),  // no attempt
		end(record.EvCancel, record.Failed, 1),     // no attempt
		end(record.EvFail, record.Available, 2),    // one attempt
		end(record.EvFail, record.Failed, 2),
		end(record.EvReap, record.Available, 2), // one attempt
		end(record.EvReap, record.Failed, 2),
	}
	for _, from := range []record.State{record.Done, record.Failed} {
		prev := withLast(freeTask(from), record.EvComplete, "", base)
		prev.Attempts = 3
		cases = append(cases, tc{name: "requeue-from-" + string(from), prev: prev,
			ev: evAt(9, record.EvRequeue, from, record.Available, 5*time.Second),
			want: func(p record.Task) record.Task {
				p.State, p.Attempts, p.Updated = record.Available, 0, at
				return p
			}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prev := c.prev
			if prev.Lease != nil {
				l := *prev.Lease
				prev.Lease = &l
			}
			snapshot := fmt.Sprintf("%+v %+v", prev, prev.Lease)
			got, err := fence.Apply(&prev, c.ev)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			want := c.want(c.prev)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Apply =\n  %+v lease %+v last %+v\nwant\n  %+v lease %+v last %+v", got, got.Lease, got.Last, want, want.Lease, want.Last)
			}
			if after := fmt.Sprintf("%+v %+v", prev, prev.Lease); after != snapshot {
				t.Errorf("Apply changed prev:\n before %s\n after  %s", snapshot, after)
			}
			if got.Lease != nil && prev.Lease != nil && got.Lease == prev.Lease {
				t.Errorf("Apply's result shares prev's lease")
			}
		})
	}
}

func TestRules_ApplyRefuses(t *testing.T) {
	dl := base.Add(time.Hour)
	for _, c := range []struct {
		name string
		prev *record.Task
		ev   record.Event
	}{
		{"claim-of-unknown-task", nil, record.Event{Seq: 1, Type: record.EvClaim, Task: "t1", Token: 1, Deadline: &dl}},
		{"complete-of-unknown-task", nil, record.Event{Seq: 1, Type: record.EvComplete, Task: "t1"}},
		{"heartbeat-without-lease", ptr(freeTask(record.Available)), record.Event{Seq: 2, Type: record.EvHeartbeat, Task: "t1", Deadline: &dl}},
		{"heartbeat-without-deadline", ptr(heldTask()), record.Event{Seq: 2, Type: record.EvHeartbeat, Task: "t1", Token: curToken}},
		{"complete-without-lease", ptr(freeTask(record.Available)), record.Event{Seq: 2, Type: record.EvComplete, Task: "t1", To: record.Done}},
		{"release-without-lease", ptr(freeTask(record.Available)), record.Event{Seq: 2, Type: record.EvRelease, Task: "t1", To: record.Available}},
		{"fail-without-lease", ptr(freeTask(record.Done)), record.Event{Seq: 2, Type: record.EvFail, Task: "t1", To: record.Failed}},
		{"reap-without-lease", ptr(freeTask(record.Available)), record.Event{Seq: 2, Type: record.EvReap, Task: "t1", To: record.Available}},
		{"revoke-without-lease", ptr(freeTask(record.Available)), record.Event{Seq: 2, Type: record.EvRevoke, Task: "t1", To: record.Available}},
		{"unknown-type", ptr(freeTask(record.Available)), record.Event{Seq: 2, Type: "teleport", Task: "t1", To: record.Done}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := fence.Apply(c.prev, c.ev); err == nil {
				t.Errorf("Apply accepted %s", c.name)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestRules_ApplyClaim(t *testing.T) {
	dl := base.Add(time.Hour)
	claimEv := record.Event{Seq: 3, Time: base, Type: record.EvClaim, Task: "t1", Agent: "a", Token: curToken, Deadline: &dl, RequestID: "r1"}
	c, ok := fence.ApplyClaim(nil, claimEv)
	want := record.Claim{Token: curToken, Task: "t1", Agent: "a", At: base, RequestID: "r1"}
	if !ok || !reflect.DeepEqual(c, want) {
		t.Fatalf("ApplyClaim(claim) = %+v, %v; want %+v, true", c, ok, want)
	}
	for _, typ := range []record.EventType{record.EvComplete, record.EvRelease, record.EvFail, record.EvReap, record.EvRevoke, record.EvCancel} {
		t.Run(string(typ), func(t *testing.T) {
			ev := record.Event{Seq: 4, Time: base.Add(time.Second), Type: typ, Task: "t1", Agent: "operator", Token: curToken, Reason: "because"}
			prev := c
			got, ok := fence.ApplyClaim(&prev, ev)
			if !ok {
				t.Fatalf("ApplyClaim(%s) touched no claim", typ)
			}
			w := want
			// The end records the claim's holder, not the event's agent.
			w.Ended = &record.LeaseEnd{Token: curToken, Agent: "a", At: base.Add(time.Second), By: typ, Reason: "because"}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("ApplyClaim(%s) =\n  %+v %+v\nwant\n  %+v %+v", typ, got, got.Ended, w, w.Ended)
			}
			if prev.Ended != nil {
				t.Errorf("ApplyClaim changed prev")
			}
			if _, ok := fence.ApplyClaim(nil, ev); ok {
				t.Errorf("ApplyClaim(%s) of an unknown token made a claim", typ)
			}
		})
	}
	for _, typ := range []record.EventType{record.EvHeartbeat, record.EvAdd, record.EvAdopt, record.EvRequeue} {
		prev := c
		if _, ok := fence.ApplyClaim(&prev, record.Event{Type: typ, Task: "t1", Token: curToken, Deadline: &dl}); ok {
			t.Errorf("ApplyClaim(%s) reported a change to the claim", typ)
		}
	}
}

// fold runs events through Apply and ApplyClaim, as the journal does.
type fold struct {
	t      *testing.T
	task   *record.Task
	claims map[uint64]record.Claim
	seq    uint64
}

func (f *fold) apply(ev record.Event) {
	f.t.Helper()
	f.seq++
	ev.Seq, ev.Task = f.seq, "t1"
	rec, err := fence.Apply(f.task, ev)
	if err != nil {
		f.t.Fatalf("Apply(%s): %v", ev.Type, err)
	}
	f.task = &rec
	if ev.Token != 0 {
		var prev *record.Claim
		if c, ok := f.claims[ev.Token]; ok {
			prev = &c
		}
		if c, ok := fence.ApplyClaim(prev, ev); ok {
			f.claims[ev.Token] = c
		}
	}
}

func (f *fold) claim(tok uint64) *record.Claim {
	if c, ok := f.claims[tok]; ok {
		return &c
	}
	return nil
}

// A task's life folded from events: attempts count fail and reap, not
// release or revoke; requeue resets them; each token's refusal explains how
// it was lost.
func TestRules_FoldLifecycle(t *testing.T) {
	f := &fold{t: t, claims: map[uint64]record.Claim{}}
	at := func(d time.Duration) time.Time { return base.Add(d) }
	claim := func(tok uint64, agent string, when time.Duration) {
		dl := at(when + time.Minute)
		f.apply(record.Event{Time: at(when), Type: record.EvClaim, From: record.Available, To: record.Claimed, Agent: agent, Token: tok, Deadline: &dl})
	}
	end := func(typ record.EventType, tok uint64, to record.State, when time.Duration) {
		f.apply(record.Event{Time: at(when), Type: typ, From: record.Claimed, To: to, Token: tok})
	}
	f.apply(record.Event{Time: base, Type: record.EvAdd, To: record.Available, MaxAttempts: 2})
	claim(1, "a", 1*time.Second)
	end(record.EvRelease, 1, record.Available, 2*time.Second)
	claim(2, "b", 3*time.Second)
	end(record.EvRevoke, 2, record.Available, 4*time.Second)
	if f.task.Attempts != 0 {
		t.Fatalf("after release and revoke: attempts = %d, want 0", f.task.Attempts)
	}
	claim(3, "c", 5*time.Second)
	end(record.EvFail, 3, record.Available, 6*time.Second)
	if f.task.Attempts != 1 {
		t.Fatalf("after one fail: attempts = %d, want 1", f.task.Attempts)
	}
	claim(4, "d", 7*time.Second)
	end(record.EvReap, 4, record.Failed, 2*time.Minute)
	if f.task.Attempts != 2 || f.task.State != record.Failed {
		t.Fatalf("after fail and reap: %s with %d attempts, want failed with 2", f.task.State, f.task.Attempts)
	}
	f.apply(record.Event{Time: at(3 * time.Minute), Type: record.EvRequeue, From: record.Failed, To: record.Available})
	if f.task.Attempts != 0 || f.task.State != record.Available {
		t.Fatalf("after requeue: %s with %d attempts, want available with 0", f.task.State, f.task.Attempts)
	}
	claim(5, "e", 4*time.Minute)
	now := at(4*time.Minute + time.Second)
	if err := fence.Authorize(*f.task, 5, f.claim(5), now); err != nil {
		t.Fatalf("current token refused: %v", err)
	}
	for tok, lost := range map[uint64]string{1: "released", 2: "revoked", 3: "failed", 4: "reaped"} {
		err := fence.Authorize(*f.task, tok, f.claim(tok), now)
		var se *fence.StaleTokenError
		if !errors.As(err, &se) {
			t.Fatalf("token %d: err = %v", tok, err)
		}
		want := fence.StaleTokenError{Reason: fence.ReasonStaleToken, Task: "t1", Yours: tok, Current: 5, Holder: "e",
			HeldSince: f.task.Lease.ClaimedAt, State: record.Claimed, LostAt: f.claims[tok].Ended.At, LostBy: lost}
		if *se != want {
			t.Errorf("token %d: %+v, want %+v", tok, *se, want)
		}
	}
	end(record.EvComplete, 5, record.Done, 5*time.Minute)
	if !fence.IsRetry(record.EvComplete, *f.task, f.claim(5)) {
		t.Errorf("complete again with token 5 is not a retry")
	}
	if fence.IsRetry(record.EvRelease, *f.task, f.claim(5)) || fence.IsRetry(record.EvHeartbeat, *f.task, f.claim(5)) {
		t.Errorf("a different call after complete counts as a retry")
	}
	if f.task.Last == nil || f.task.Last.Token != 5 || f.task.Last.By != record.EvComplete || f.task.Last.Agent != "e" {
		t.Errorf("Last = %+v, want the end of token 5 by complete", f.task.Last)
	}
}

// Issue 9, item 17: no refusal's message shows the current holder's token
// (an agent told "stale, current token N" may retry with N); it names the
// holder and since when.
func TestRules_RefusalNeverShowsCurrentToken(t *testing.T) {
	for _, tc := range tokenCases() {
		err := fence.Authorize(tc.task, tc.token, tc.claim, tc.now)
		var se *fence.StaleTokenError
		if !errors.As(err, &se) || se.Current == 0 || se.Current == se.Yours {
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, fmt.Sprint(se.Current)) {
			t.Errorf("%s: message shows the current token %d: %s", tc.name, se.Current, msg)
		}
		if want := "held by " + se.Holder + " since " + se.HeldSince.UTC().Format(time.RFC3339); !strings.Contains(msg, want) {
			t.Errorf("%s: message %q lacks %q", tc.name, msg, want)
		}
	}
}

// TestRules_Cancel: what an operator's cancel does from every state. A
// task that has not finished goes to failed/ with reason "cancelled" (the
// operator's reason appended), its lease ends (the holder's token dies,
// lost_by "cancelled") and attempts stay as they were; a cancelled task
// answers retry; a done task, or one failed for another reason, is
// refused.
func TestRules_Cancel(t *testing.T) {
	at := base.Add(5 * time.Second)
	held := heldTask()
	held.Attempts = 2
	expired := heldTask()
	expiredAt := deadline.Add(time.Hour) // the lease ran out, not reaped yet
	failedBy := func(by record.EventType) record.Task {
		rec := freeTask(record.Failed)
		rec.Attempts = 3
		rec.Last = &record.LeaseEnd{Token: oldToken, Agent: "old", At: lostAt, By: by, Reason: "x"}
		return rec
	}
	for _, tc := range []struct {
		name    string
		task    record.Task
		now     time.Time
		reason  string
		retry   bool
		refused bool
		// wantEv is the event (To Failed, Type cancel, Time now, Task t1).
		from   record.State
		token  uint64 // the lease the cancel ends (0: none)
		holder string
		why    string
	}{
		{name: "available", task: freeTask(record.Available), now: at, from: record.Available, why: "cancelled"},
		{name: "available/with-reason", task: freeTask(record.Available), now: at, reason: "superseded", from: record.Available, why: "cancelled: superseded"},
		{name: "available/after-a-release", task: func() record.Task {
			r := freeTask(record.Available)
			r.Last = &record.LeaseEnd{Token: oldToken, Agent: "old", At: lostAt, By: record.EvRelease}
			return r
		}(), now: at, from: record.Available, why: "cancelled"},
		{name: "claimed", task: held, now: at, reason: "gone", from: record.Claimed, token: curToken, holder: "a", why: "cancelled: gone"},
		{name: "claimed/lease-expired-unreaped", task: expired, now: expiredAt, from: record.Claimed, token: curToken, holder: "a", why: "cancelled"},
		{name: "failed/cancelled-already", task: failedBy(record.EvCancel), now: at, retry: true},
		{name: "failed/cancelled-already-other-reason", task: failedBy(record.EvCancel), now: at, reason: "again", retry: true},
		{name: "failed/by-fail", task: failedBy(record.EvFail), now: at, refused: true},
		{name: "failed/by-reap", task: failedBy(record.EvReap), now: at, refused: true},
		{name: "failed/by-missing", task: failedBy(record.EvMissing), now: at, refused: true},
		{name: "failed/no-last", task: freeTask(record.Failed), now: at, refused: true},
		{name: "done", task: freeTask(record.Done), now: at, refused: true},
		{name: "done/cancel-then-requeued-then-done", task: func() record.Task {
			r := freeTask(record.Done)
			r.Last = &record.LeaseEnd{Token: curToken, Agent: "a", At: lostAt, By: record.EvComplete}
			return r
		}(), now: at, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, retry, err := fence.CancelEvent(tc.task, "operator", tc.reason, tc.now)
			if tc.refused {
				var na *fence.NotAvailableError
				if !errors.As(err, &na) || !reflect.DeepEqual(*na, fence.NotAvailableError{Task: "t1", State: tc.task.State, Op: "cancel"}) || retry {
					t.Fatalf("CancelEvent = %+v, %v, %v; want NotAvailableError", ev, retry, err)
				}
				if !strings.Contains(err.Error(), "already finished") {
					t.Errorf("message %q does not say the task already finished", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CancelEvent: %v", err)
			}
			if retry != tc.retry {
				t.Fatalf("retry = %v, want %v", retry, tc.retry)
			}
			if retry {
				if !reflect.DeepEqual(ev, record.Event{}) {
					t.Errorf("a retry built an event: %+v", ev)
				}
				return
			}
			want := record.Event{Time: tc.now, Type: record.EvCancel, Task: "t1", From: tc.from, To: record.Failed,
				Agent: "operator", Token: tc.token, Reason: tc.why}
			if !reflect.DeepEqual(ev, want) {
				t.Fatalf("event =\n  %+v\nwant\n  %+v", ev, want)
			}

			// Folded: failed, no lease, attempts unchanged, the end recorded.
			ev.Seq = 9
			got, err := fence.Apply(&tc.task, ev)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			w := tc.task
			w.State, w.Updated, w.Lease = record.Failed, tc.now, nil
			w.Last = &record.LeaseEnd{Token: tc.token, Agent: tc.holder, At: tc.now, By: record.EvCancel, Reason: tc.why}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("Apply =\n  %+v last %+v\nwant\n  %+v last %+v", got, got.Last, w, w.Last)
			}
			if !fence.Cancelled(got) {
				t.Errorf("Cancelled(after) = false")
			}
			// Cancelling again is a retry.
			if _, retry, err := fence.CancelEvent(got, "operator", "", tc.now); !retry || err != nil {
				t.Errorf("second cancel: retry %v, err %v; want a retry", retry, err)
			}
			if tc.token == 0 {
				return
			}
			// The holder's token is dead, lost_by "cancelled", and no call
			// of its is a retry.
			c, ok := fence.ApplyClaim(&record.Claim{Token: curToken, Task: "t1", Agent: "a", At: base}, ev)
			if !ok {
				t.Fatal("ApplyClaim touched no claim")
			}
			aerr := fence.Authorize(got, curToken, &c, tc.now)
			var se *fence.StaleTokenError
			if !errors.As(aerr, &se) || se.Reason != fence.ReasonStaleToken || se.LostBy != "cancelled" || !se.LostAt.Equal(tc.now) || se.State != record.Failed {
				t.Errorf("Authorize(cancelled token) = %v; want stale_token, lost_by cancelled at the cancel", aerr)
			}
			for _, op := range []record.EventType{record.EvHeartbeat, record.EvComplete, record.EvRelease, record.EvFail, record.EvPut} {
				if fence.IsRetry(op, got, &c) {
					t.Errorf("%s with the cancelled token counts as a retry", op)
				}
			}
		})
	}
}

// Dependencies and labels fold like every other field: add sets them, set
// replaces priority, labels and After together, dep_done sets After to
// what the task still waits for and moves it to available/ when that is
// nothing and it is not scheduled for later. Blocked and Ready follow
// from the record.
func TestRules_ApplyDepsAndLabels(t *testing.T) {
	add := record.Event{Seq: 3, Time: base, Type: record.EvAdd, Task: "d", To: record.Waiting, MaxAttempts: 3,
		After: []string{"x", "y"}, Labels: []string{"gpu"}, NotBefore: base.Add(time.Hour)}
	rec, err := fence.Apply(nil, add)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec.After, []string{"x", "y"}) || !reflect.DeepEqual(rec.Labels, []string{"gpu"}) || !rec.NotBefore.Equal(base.Add(time.Hour)) {
		t.Fatalf("Apply(add) = %+v: After, Labels, NotBefore not taken from the event", rec)
	}
	if !rec.Blocked() || rec.Ready() || rec.Scheduled() {
		t.Errorf("a task with After: Blocked %v, Ready %v, Scheduled %v; want true, false, false", rec.Blocked(), rec.Ready(), rec.Scheduled())
	}
	onlyY := func(r record.Task) record.Task { r.After = []string{"y"}; return r }
	unscheduled := func(r record.Task) record.Task { r.NotBefore = time.Time{}; return r }
	for _, tc := range []struct {
		name  string
		prev  record.Task
		dep   string
		now   time.Time
		after []string
		to    record.State
		ready bool
	}{
		{"x done: waits for y", rec, "x", base, []string{"y"}, record.Waiting, false},
		{"a dependency it does not have: no change", rec, "z", base, []string{"x", "y"}, record.Waiting, false},
		{"last done, scheduled for later: waits for its time", onlyY(rec), "y", base, nil, record.Waiting, false},
		{"last done, its time passed: available", onlyY(rec), "y", base.Add(time.Hour), nil, record.Available, true},
		{"last done, not scheduled: available", unscheduled(onlyY(rec)), "y", base, nil, record.Available, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := fence.DepDoneEvent(tc.prev, tc.dep, tc.now)
			if ev.Type != record.EvDepDone || ev.From != tc.prev.State || ev.To != tc.to {
				t.Errorf("DepDoneEvent = %+v: want a dep_done from %s to %s", ev, tc.prev.State, tc.to)
			}
			got, err := fence.Apply(&tc.prev, ev)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.After, tc.after) || got.Ready() != tc.ready || got.State != tc.to {
				t.Errorf("After = %v, Ready %v, State %s; want %v, %v, %s", got.After, got.Ready(), got.State, tc.after, tc.ready, tc.to)
			}
			if got.Scheduled() != (tc.to == record.Waiting && len(tc.after) == 0) {
				t.Errorf("Scheduled = %v with After %v in %s", got.Scheduled(), got.After, got.State)
			}
			if tc.ready && !got.NotBefore.IsZero() {
				t.Errorf("available with NotBefore %v: a time passed is dropped", got.NotBefore)
			}
			if !reflect.DeepEqual(tc.prev.After, rec.After) && !strings.HasPrefix(tc.name, "last done") {
				t.Errorf("Apply changed prev's After: %v", tc.prev.After)
			}
		})
	}
	set := record.Event{Seq: 9, Time: base, Type: record.EvSet, Task: "d", From: record.Waiting, To: record.Available,
		Priority: 7, Labels: []string{"a", "b"}}
	got, err := fence.Apply(&rec, set)
	if err != nil {
		t.Fatal(err)
	}
	if got.Priority != 7 || !reflect.DeepEqual(got.Labels, []string{"a", "b"}) || got.After != nil || !got.Ready() {
		t.Errorf("Apply(set) = %+v; want priority 7, labels [a b], no After, ready", got)
	}
	claimed := heldTask()
	if _, err := fence.Apply(&claimed, set); err == nil {
		t.Error("a set of a claimed task folded")
	}
}

// Unblocks: only the event that makes a task done releases its dependents
// (not a repeat on a done task, such as missing, nor a failure).
func TestRules_Unblocks(t *testing.T) {
	held, done := heldTask(), heldTask()
	done.State, done.Lease = record.Done, nil
	for _, tc := range []struct {
		prev *record.Task
		ev   record.Event
		want bool
	}{
		{&held, record.Event{Type: record.EvComplete, From: record.Claimed, To: record.Done}, true},
		{&held, record.Event{Type: record.EvFail, From: record.Claimed, To: record.Failed}, false},
		{&held, record.Event{Type: record.EvCancel, From: record.Claimed, To: record.Failed}, false},
		{&done, record.Event{Type: record.EvMissing, From: record.Done, To: record.Done}, false},
		{nil, record.Event{Type: record.EvAdopt, To: record.Done}, false},
	} {
		if got := fence.Unblocks(tc.prev, tc.ev); got != tc.want {
			t.Errorf("Unblocks(%v, %s→%s) = %v, want %v", tc.prev != nil, tc.ev.Type, tc.ev.To, got, tc.want)
		}
	}
}

func TestRules_NormalizeLabels(t *testing.T) {
	if got := fence.NormalizeLabels([]string{"b", "a", "b"}); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("NormalizeLabels = %v, want [a b]", got)
	}
	if got := fence.NormalizeLabels(nil); got != nil {
		t.Errorf("NormalizeLabels(nil) = %v, want nil", got)
	}
}
