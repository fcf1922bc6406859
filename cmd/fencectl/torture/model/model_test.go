package model

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// Unit tests of the model on hand-made histories.

func ptr(n int) *int { return &n }

// hist builds a history; unless given, call i takes [10i+1, 10i+5], one
// after the other.
type hist struct{ calls []*Call }

func (h *hist) add(c Call) *Call {
	c.ID = len(h.calls)
	if c.Call == 0 && c.Return == 0 {
		c.Call, c.Return = int64(10*c.ID+1), int64(10*c.ID+5)
	}
	h.calls = append(h.calls, &c)
	return &c
}

// check checks h both ways (killed windows closed at death, and open) and
// fails if they disagree.
func (h *hist) check(t *testing.T, cfg Config) porcupine.CheckResult {
	t.Helper()
	res, _, _, _ := Check(cfg, h.calls, []string{"a", "b"}, Options{Verbose: true})
	open, _, _, _ := Check(cfg, h.calls, []string{"a", "b"}, Options{OpenKilled: true, Verbose: true})
	whole, _, _, _ := Check(cfg, h.calls, []string{"a", "b"}, Options{Whole: true, Verbose: true})
	wholeOpen, _, _, _ := Check(cfg, h.calls, []string{"a", "b"}, Options{OpenKilled: true, Whole: true, Verbose: true})
	if res != open || res != whole || res != wholeOpen {
		t.Errorf("per task, killed windows closed: %s; open: %s; whole tree, closed: %s; open: %s", res, open, whole, wholeOpen)
	}
	return res
}

// legalBase is a legal history over tasks a and b that uses every rule.
func legalBase() *hist {
	h := &hist{}
	h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
	h.add(Call{Kind: Heartbeat, Task: "a", Token: 100, Code: 0})
	h.add(Call{Kind: Verify, Task: "a", Token: 999, Stale: StaleNever, Code: 3})
	h.add(Call{Kind: Complete, Task: "a", Token: 100, Code: 0, State: "done"})
	h.add(Call{Kind: Complete, Task: "a", Token: 100, Stale: StaleRetry, Code: 0, Retry: true, State: "done"})
	h.add(Call{Kind: Release, Task: "a", Token: 100, Stale: StaleDead, Code: 3})
	h.add(Call{Kind: Claim, Task: "a", Code: 4})
	h.add(Call{Kind: Next, Code: 0, OutTask: "b", OutToken: 101})
	h.add(Call{Kind: Next, Code: 4})
	h.add(Call{Kind: Revoke, Task: "b", Code: 0, OutToken: 101, State: "available"})
	h.add(Call{Kind: Heartbeat, Task: "b", Token: 101, Stale: StaleDead, Code: 3})
	h.add(Call{Kind: Requeue, Task: "a", Code: 0, State: "available"})
	h.add(Call{Kind: Requeue, Task: "b", Code: 4})
	h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 105})
	h.add(Call{Kind: Complete, Task: "a", Token: 100, Stale: StaleDead, Code: 0, Retry: true, State: "claimed"})
	h.add(Call{Kind: Complete, Task: "b", Token: 105, Stale: StaleOther, Code: 3})
	h.add(Call{Kind: Tick})
	h.add(Call{Kind: Verify, Task: "a", Token: 105, Code: 3})     // expired
	h.add(Call{Kind: Next, Code: 0, OutTask: "b", OutToken: 110}) // reaps a first
	h.add(Call{Kind: Restore, Task: "a", Token: 105, Code: 3})    // reaped
	h.add(Call{Kind: Fail, Task: "b", Token: 110, Code: 0, State: "available", Attempts: ptr(1)})
	h.add(Call{Kind: Fail, Task: "b", Token: 110, Code: 0, Retry: true, State: "available"})
	h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 111, Attempts: ptr(1)})
	h.add(Call{Kind: Restore, Task: "b", Token: 111, Code: 0, OutToken: 111, Renewed: true})
	h.add(Call{Kind: Tick})
	h.add(Call{Kind: Revoke, Task: "b", Code: 0, OutToken: 111, State: "available"}) // expired, not reaped: revoke still frees it
	h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 120})
	h.add(Call{Kind: Tick})
	h.add(Call{Kind: Reap, Code: 0, Reaped: []Reaped{{"b", 120, "failed"}}}) // b's second attempt (fail, then this expiry)
	return h
}

func TestModel_LegalHistoryPasses(t *testing.T) {
	h := legalBase()
	if got := h.check(t, Config{MaxAttempts: 2}); got != porcupine.Ok {
		t.Fatalf("legal history: %s, want Ok", got)
	}
}

func TestModel_KilledCallsMayOrMayNotHaveHappened(t *testing.T) {
	// Killed claim took effect: the next claim of a is refused, a revoke
	// names a token nobody saw.
	h := &hist{}
	h.add(Call{Kind: Claim, Task: "a", Killed: true})
	h.add(Call{Kind: Claim, Task: "a", Code: 4})
	h.add(Call{Kind: Revoke, Task: "a", Code: 0, OutToken: 77, State: "available"})
	h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 80})
	if got := h.check(t, Config{MaxAttempts: 3}); got != porcupine.Ok {
		t.Errorf("killed claim that took effect: %s, want Ok", got)
	}
	// Killed claim-next and killed complete that did not take effect.
	h = &hist{}
	h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 10})
	h.add(Call{Kind: Next, Killed: true})
	h.add(Call{Kind: Complete, Task: "a", Token: 10, Killed: true})
	h.add(Call{Kind: Heartbeat, Task: "a", Token: 10, Code: 0})
	h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 12})
	if got := h.check(t, Config{MaxAttempts: 3}); got != porcupine.Ok {
		t.Errorf("killed calls that did not take effect: %s, want Ok", got)
	}
	// Killed complete that did take effect, then its retry.
	h = &hist{}
	h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 10})
	h.add(Call{Kind: Complete, Task: "a", Token: 10, Killed: true})
	h.add(Call{Kind: Complete, Task: "a", Token: 10, Code: 0, Retry: true, State: "done"})
	if got := h.check(t, Config{MaxAttempts: 3}); got != porcupine.Ok {
		t.Errorf("killed complete then its retry: %s, want Ok", got)
	}
}

func TestModel_IllegalHistoriesAreRejected(t *testing.T) {
	cases := []struct {
		name string
		bad  func(h *hist)
	}{
		{"two claims of a free task get the same token", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Release, Task: "a", Token: 100, Code: 0, State: "available"})
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
		}},
		{"a claim's token is below an earlier one", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Release, Task: "a", Token: 100, Code: 0, State: "available"})
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 99})
		}},
		{"two concurrent claims of one task both succeed", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100, Call: 1, Return: 10})
			h.add(Call{Kind: Next, Code: 0, OutTask: "a", OutToken: 101, Call: 2, Return: 11})
		}},
		{"complete with a stale token answers 0", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Revoke, Task: "a", Code: 0, OutToken: 100, State: "available"})
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 101})
			h.add(Call{Kind: Complete, Task: "a", Token: 100, Stale: StaleDead, Code: 0, State: "done"})
		}},
		{"retry of another call than the one that ended the lease", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Complete, Task: "a", Token: 100, Code: 0, State: "done"})
			h.add(Call{Kind: Release, Task: "a", Token: 100, Code: 0, Retry: true, State: "done"})
		}},
		{"token of another task accepted", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 101})
			h.add(Call{Kind: Heartbeat, Task: "b", Token: 100, Stale: StaleOther, Code: 0})
		}},
		{"verify of an expired lease answers 0", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Tick})
			h.add(Call{Kind: Verify, Task: "a", Token: 100, Code: 0})
		}},
		{"the current holder is refused", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Put, Task: "a", Token: 100, Code: 3})
		}},
		{"claim-next says nothing is free while a is free", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 100})
			h.add(Call{Kind: Next, Code: 4})
		}},
		{"fail at max attempts does not go to failed", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Fail, Task: "a", Token: 100, Code: 0, State: "available"})
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 101})
			h.add(Call{Kind: Fail, Task: "a", Token: 101, Code: 0, State: "available"})
		}},
		{"a killed claim cannot explain a second holder", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Killed: true})
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Revoke, Task: "a", Code: 0, OutToken: 100, State: "available"})
			h.add(Call{Kind: Revoke, Task: "a", Code: 0, OutToken: 90, State: "available"})
		}},
		{"a claim reports the attempts wrong", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Fail, Task: "a", Token: 100, Code: 0, State: "available", Attempts: ptr(1)})
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 101, Attempts: ptr(0)})
		}},
		{"requeue of a claimed task", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Requeue, Task: "a", Code: 0, State: "available"})
		}},
		{"an expired lease is not reported by reap", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Tick})
			h.add(Call{Kind: Reap, Code: 0})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &hist{}
			tc.bad(h)
			if got := h.check(t, Config{MaxAttempts: 2}); got != porcupine.Illegal {
				t.Errorf("%s, want Illegal", got)
			}
		})
	}
}

func TestModel_BrokenRulesRejectALegalHistory(t *testing.T) {
	for _, bug := range []string{"any-token", "no-retry"} {
		if got := legalBase().check(t, Config{MaxAttempts: 2, Bug: bug}); got != porcupine.Illegal {
			t.Errorf("model with bug %q on the legal history: %s, want Illegal", bug, got)
		}
	}
}

// Cancel: available or claimed (expired or not) → failed, the lease's
// token dead, attempts kept; again: a retry; done, or failed otherwise: 4;
// requeue brings it back and a later cancel is a new one.
func TestModel_Cancel(t *testing.T) {
	h := &hist{}
	h.add(Call{Kind: Cancel, Task: "a", Code: 0, State: "failed", Attempts: ptr(0)})
	h.add(Call{Kind: Cancel, Task: "a", Code: 0, Retry: true, State: "failed"})
	h.add(Call{Kind: Claim, Task: "a", Code: 4})
	h.add(Call{Kind: Requeue, Task: "a", Code: 0, State: "available"})
	h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
	h.add(Call{Kind: Fail, Task: "a", Token: 100, Code: 0, State: "available", Attempts: ptr(1)})
	h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 101})
	h.add(Call{Kind: Cancel, Task: "a", Code: 0, OutToken: 101, State: "failed", Attempts: ptr(1)})
	h.add(Call{Kind: Heartbeat, Task: "a", Token: 101, Stale: StaleDead, Code: 3})
	h.add(Call{Kind: Complete, Task: "a", Token: 101, Stale: StaleDead, Code: 3})
	h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 102})
	h.add(Call{Kind: Tick})
	h.add(Call{Kind: Cancel, Task: "b", Code: 0, OutToken: 102, State: "failed", Attempts: ptr(0)}) // expired, not reaped
	h.add(Call{Kind: Reap, Code: 0})
	h.add(Call{Kind: Requeue, Task: "b", Code: 0, State: "available"})
	h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 110})
	h.add(Call{Kind: Complete, Task: "b", Token: 110, Code: 0, State: "done"})
	h.add(Call{Kind: Cancel, Task: "b", Code: 4})
	// A killed cancel may have taken effect: then its repeat is a retry.
	h.add(Call{Kind: Requeue, Task: "a", Code: 0, State: "available"})
	h.add(Call{Kind: Cancel, Task: "a", Killed: true})
	h.add(Call{Kind: Cancel, Task: "a", Code: 0, Retry: true, State: "failed"})
	if got := h.check(t, Config{MaxAttempts: 3}); got != porcupine.Ok {
		t.Fatalf("legal history with cancels: %s, want Ok", got)
	}

	for _, tc := range []struct {
		name string
		bad  func(h *hist)
	}{
		{"the cancelled token still acts", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Cancel, Task: "a", Code: 0, OutToken: 100, State: "failed"})
			h.add(Call{Kind: Complete, Task: "a", Token: 100, Stale: StaleDead, Code: 0, State: "done"})
		}},
		{"a cancelled task is claimed", func(h *hist) {
			h.add(Call{Kind: Cancel, Task: "a", Code: 0, State: "failed"})
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
		}},
		{"cancel names another token than the holder's", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Cancel, Task: "a", Code: 0, OutToken: 99, State: "failed"})
		}},
		{"cancel counts an attempt", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Cancel, Task: "a", Code: 0, OutToken: 100, State: "failed", Attempts: ptr(1)})
		}},
		{"cancel of a done task succeeds", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Complete, Task: "a", Token: 100, Code: 0, State: "done"})
			h.add(Call{Kind: Cancel, Task: "a", Code: 0, State: "failed"})
		}},
		{"cancel of a task failed otherwise is a retry", func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Fail, Task: "a", Token: 100, Code: 0, State: "available"})
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 101})
			h.add(Call{Kind: Fail, Task: "a", Token: 101, Code: 0, State: "failed"})
			h.add(Call{Kind: Cancel, Task: "a", Code: 0, Retry: true, State: "failed"})
		}},
		{"a first cancel answers retry", func(h *hist) {
			h.add(Call{Kind: Cancel, Task: "a", Code: 0, Retry: true, State: "failed"})
		}},
		{"a cancel after a requeue is refused", func(h *hist) {
			h.add(Call{Kind: Cancel, Task: "a", Code: 0, State: "failed"})
			h.add(Call{Kind: Requeue, Task: "a", Code: 0, State: "available"})
			h.add(Call{Kind: Cancel, Task: "a", Code: 4})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &hist{}
			tc.bad(h)
			if got := h.check(t, Config{MaxAttempts: 2}); got != porcupine.Illegal {
				t.Errorf("%s, want Illegal", got)
			}
		})
	}
}

// Batch claims: every named task is claimed with its own token, above
// every earlier one, or none is (exit 4, nothing changes but the reaps);
// a killed batch claimed all of them or none.
func TestModel_Batch(t *testing.T) {
	h := &hist{}
	h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Code: 0, OutTokens: []uint64{100, 101}})
	h.add(Call{Kind: Heartbeat, Task: "b", Token: 101, Code: 0})
	h.add(Call{Kind: Complete, Task: "a", Token: 100, Code: 0, State: "done"})
	h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Code: 4}) // both taken: refused
	h.add(Call{Kind: Release, Task: "b", Token: 101, Code: 0, State: "available"})
	h.add(Call{Kind: Batch, Tasks: []string{"b", "a"}, Code: 4}) // a is done: b is not claimed either
	h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 102})
	h.add(Call{Kind: Tick})
	h.add(Call{Kind: Requeue, Task: "a", Code: 0, State: "available"})
	h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Code: 0, OutTokens: []uint64{110, 111}}) // reaps b first
	h.add(Call{Kind: Restore, Task: "b", Token: 102, Code: 3})
	h.add(Call{Kind: Release, Task: "a", Token: 110, Code: 0, State: "available"})
	h.add(Call{Kind: Release, Task: "b", Token: 111, Code: 0, State: "available", Attempts: ptr(1)})
	h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Killed: true})
	h.add(Call{Kind: Claim, Task: "a", Code: 4}) // the killed batch took both
	h.add(Call{Kind: Claim, Task: "b", Code: 4})
	if got := h.check(t, Config{MaxAttempts: 3}); got != porcupine.Ok {
		t.Fatalf("legal history with batch claims: %s, want Ok", got)
	}

	for _, tc := range []struct {
		name      string
		wholeOnly bool // a property of several tasks: only the whole-tree model sees it
		bad       func(h *hist)
	}{
		{"a batch claims a claimed task", false, func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Code: 0, OutTokens: []uint64{101, 102}})
		}},
		{"a batch token not above the task's last", false, func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Release, Task: "a", Token: 100, Code: 0, State: "available"})
			h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Code: 0, OutTokens: []uint64{100, 102}})
		}},
		{"a refused batch claimed one of them", false, func(h *hist) {
			h.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
			h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Code: 4})
			h.add(Call{Kind: Claim, Task: "b", Code: 4}) // b was left available
		}},
		{"refused while both were available", true, func(h *hist) {
			h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Code: 4})
		}},
		{"two tasks of a batch share a token", true, func(h *hist) {
			h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Code: 0, OutTokens: []uint64{100, 100}})
		}},
		{"a killed batch claimed one of two", true, func(h *hist) {
			h.add(Call{Kind: Batch, Tasks: []string{"a", "b"}, Killed: true})
			h.add(Call{Kind: Claim, Task: "a", Code: 4})
			h.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 100})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &hist{}
			tc.bad(h)
			whole, _, _, _ := Check(Config{MaxAttempts: 2}, h.calls, []string{"a", "b"}, Options{Whole: true})
			if whole != porcupine.Illegal {
				t.Errorf("whole tree: %s, want Illegal", whole)
			}
			part, _, _, _ := Check(Config{MaxAttempts: 2}, h.calls, []string{"a", "b"}, Options{})
			if want := porcupine.Illegal; !tc.wholeOnly && part != want {
				t.Errorf("per task: %s, want %s", part, want)
			}
		})
	}
}

// TestModel_RefusedClaimRollsBackItsReaps: a claim refused about a task
// it did not reap commits nothing, its reaps of other tasks included
// (fence.keepsReaps), so a reap after it still finds them; one refused
// about its own reaped task keeps them. The whole-tree model used to let
// every refused claim reap, and rejected such a history (seen once under
// make test's load: a refused restore between a tick and a reap).
func TestModel_RefusedClaimRollsBackItsReaps(t *testing.T) {
	rolledBack := &hist{}
	rolledBack.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
	rolledBack.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 101})
	rolledBack.add(Call{Kind: Complete, Task: "b", Token: 101, Code: 0, State: "done"})
	rolledBack.add(Call{Kind: Tick})
	rolledBack.add(Call{Kind: Restore, Task: "b", Token: 101, Stale: StaleDead, Code: 3}) // about b, which it did not reap
	rolledBack.add(Call{Kind: Reap, Code: 0, Reaped: []Reaped{{"a", 100, "available"}}})
	if res := rolledBack.check(t, Config{MaxAttempts: 3}); res != porcupine.Ok {
		t.Errorf("a reap after a refused restore that reaped nothing of its own: %s, want Ok", res)
	}

	kept := &hist{}
	kept.add(Call{Kind: Claim, Task: "a", Code: 0, OutTask: "a", OutToken: 100})
	kept.add(Call{Kind: Claim, Task: "b", Code: 0, OutTask: "b", OutToken: 101})
	kept.add(Call{Kind: Tick})
	kept.add(Call{Kind: Restore, Task: "b", Token: 101, Code: 3}) // b's own lease ran out: it reaps, and keeps its reaps
	kept.add(Call{Kind: Reap, Code: 0, Reaped: []Reaped{{"a", 100, "available"}}})
	// Per task this is allowed (a partition cannot see which task a
	// refusal was about); the whole-tree model sees it.
	if res, _, _, _ := Check(Config{MaxAttempts: 3}, kept.calls, []string{"a", "b"}, Options{Whole: true}); res != porcupine.Illegal {
		t.Errorf("a reap of a lease that a refused restore about its own reaped task had already reaped: %s, want Illegal", res)
	}
}
