package fence_test

import (
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// Backoff doubles per attempt from the base, stops at the cap (an hour
// when none is set), and moves by the jitter given, never more than 20%.
func TestRules_Backoff(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name        string
		base, limit time.Duration
		attempt     int
		jitter      float64
		want        time.Duration
	}{
		{"no base: no backoff", 0, 0, 3, 0, 0},
		{"first attempt: the base", s, 0, 1, 0, s},
		{"third attempt: four times", s, 0, 3, 0, 4 * s},
		{"capped", s, 5 * s, 10, 0, 5 * s},
		{"default cap: an hour", time.Minute, 0, 30, 0, time.Hour},
		{"a base above the default cap is its own cap", 2 * time.Hour, 0, 3, 0, 2 * time.Hour},
		{"jitter up", 10 * s, 0, 1, 0.2, 12 * s},
		{"jitter down", 10 * s, 0, 2, -0.1, 18 * s},
		{"jitter clamped", 10 * s, 0, 1, 5, 12 * s},
		{"many attempts do not overflow", s, 0, 1000, 0, time.Hour},
	} {
		if got := fence.Backoff(tc.base, tc.limit, tc.attempt, tc.jitter); got != tc.want {
			t.Errorf("%s: Backoff(%s, %s, %d, %v) = %s; want %s", tc.name, tc.base, tc.limit, tc.attempt, tc.jitter, got, tc.want)
		}
	}
	// The jitter is drawn from the task and the token: within bounds,
	// the same for the same claim, and different claims spread apart.
	seen := map[float64]bool{}
	for tok := uint64(1); tok <= 50; tok++ {
		j := fence.BackoffJitter("t1", tok)
		if j < -fence.MaxJitter || j > fence.MaxJitter {
			t.Fatalf("BackoffJitter = %v: out of ±%v", j, fence.MaxJitter)
		}
		if j != fence.BackoffJitter("t1", tok) {
			t.Fatal("BackoffJitter is not a function of the task and token")
		}
		seen[j] = true
	}
	if len(seen) < 45 {
		t.Errorf("50 claims drew %d distinct jitters: not spread", len(seen))
	}
}

// DueEvent moves a waiting task that waits for a time only, at or after
// that time; WaitOf says why a task waits.
func TestRules_DueEventAndWaitOf(t *testing.T) {
	at := base.Add(time.Minute)
	sched := record.Task{ID: "s", State: record.Waiting, NotBefore: at}
	if _, ok := fence.DueEvent(sched, at.Add(-time.Nanosecond)); ok {
		t.Error("due before its time")
	}
	ev, ok := fence.DueEvent(sched, at)
	if !ok || ev.Type != record.EvDue || ev.From != record.Waiting || ev.To != record.Available || ev.Reason != fence.ReasonDue {
		t.Errorf("DueEvent at its time = %+v, %v; want a due event to available, reason %q", ev, ok, fence.ReasonDue)
	}
	got, err := fence.Apply(&sched, ev)
	if err != nil || got.State != record.Available || !got.NotBefore.IsZero() || !got.Ready() {
		t.Errorf("Apply(due) = %+v, %v; want available, ready, NotBefore cleared", got, err)
	}
	blocked := sched
	blocked.After = []string{"x"}
	if _, ok := fence.DueEvent(blocked, at.Add(time.Hour)); ok {
		t.Error("a blocked task came due: it waits for its dependencies too")
	}
	if _, err := fence.Apply(&got, ev); err == nil {
		t.Error("Apply(due) of an available task: want an error")
	}

	backing := record.Task{ID: "b", State: record.Waiting, NotBefore: at, Attempts: 2, Last: &record.LeaseEnd{By: record.EvFail}}
	for _, tc := range []struct {
		rec  record.Task
		kind fence.WaitKind
		text string
	}{
		{sched, fence.WaitScheduled, "scheduled for 2030-01-01T12:01:00Z"},
		{blocked, fence.WaitBlocked, "blocked by x, then scheduled for 2030-01-01T12:01:00Z"},
		{backing, fence.WaitBackingOff, "backing off until 2030-01-01T12:01:00Z after attempt 2"},
	} {
		w, ok := fence.WaitOf(tc.rec)
		if !ok || w.Kind != tc.kind || w.String() != tc.text {
			t.Errorf("WaitOf(%s) = %+v (%q), %v; want %s, %q", tc.rec.ID, w, w.String(), ok, tc.kind, tc.text)
		}
		if w.Kind.Reason() == "" {
			t.Errorf("%s: no refusal reason", w.Kind)
		}
	}
	if _, ok := fence.WaitOf(record.Task{ID: "a", State: record.Available}); ok {
		t.Error("WaitOf an available task: want none")
	}
}
