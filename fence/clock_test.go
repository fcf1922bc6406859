package fence_test

// Lease expiry, tested on a clock the test sets (Options.Clock) instead of
// sleeping.

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// fakeNow is the time testClock tells, while a test has set it; nil
// means the system clock. newTreeWith gives every tree testClock.
var fakeNow atomic.Pointer[time.Time]

// testClock is the Options.Clock of the trees the tests make.
func testClock() time.Time {
	if p := fakeNow.Load(); p != nil {
		return *p
	}
	return time.Now().UTC()
}

// setNow stops testClock at now for the rest of the test.
func setNow(t *testing.T, now time.Time) {
	t.Helper()
	now = now.UTC()
	fakeNow.Store(&now)
	t.Cleanup(func() { fakeNow.Store(nil) })
}

// clockTree is newTree with the clock at base.
func clockTree(t *testing.T) *fence.Tree {
	t.Helper()
	setNow(t, base)
	return newTree(t)
}

func claimTTL(t *testing.T, tree *fence.Tree, id, agent string, ttl time.Duration) fence.ClaimResult {
	t.Helper()
	c, err := tree.Claim(bg, fence.ClaimRequest{ID: id, Agent: agent, TTL: ttl})
	if err != nil {
		t.Fatalf("Claim %s: %v", id, err)
	}
	return c
}

func TestTree_LeaseExpiresAtDeadline(t *testing.T) {
	tree := clockTree(t)
	add(t, tree, "t1", 0)
	c := claimTTL(t, tree, "t1", "a", time.Minute)
	if dl := base.Add(time.Minute); !c.Deadline.Equal(dl) {
		t.Fatalf("deadline = %v, want %v", c.Deadline, dl)
	}
	setNow(t, base.Add(time.Minute-time.Second))
	if _, err := tree.Verify(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
		t.Fatalf("Verify a second before the deadline: %v", err)
	}
	setNow(t, c.Deadline) // exactly at the deadline the lease is gone
	want := fence.StaleTokenError{Reason: fence.ReasonLeaseExpired, Task: "t1", Yours: c.Token, Current: c.Token,
		Holder: "a", HeldSince: c.Task.Lease.ClaimedAt, State: record.Claimed, LostAt: c.Deadline, LostBy: "expired"}
	for _, op := range fencedOps {
		if op.name == "claim-token" {
			continue // reaps first: below
		}
		t.Run(op.name, func(t *testing.T) {
			before := snap(t, tree)
			se := staleErr(t, op.call(tree, fence.FencedRequest{ID: "t1", Token: c.Token, Agent: "a"}))
			got := *se
			if !got.LostAt.Equal(want.LostAt) {
				t.Errorf("LostAt = %v, want %v", got.LostAt, want.LostAt)
			}
			w := want
			got.LostAt, w.LostAt = time.Time{}, time.Time{}
			if got != w {
				t.Errorf("StaleTokenError =\n  %+v\nwant\n  %+v", got, w)
			}
			unchanged(t, tree, before, op.name+" with an expired token")
		})
	}
	// claim --token reaps expired leases first, so the token comes back
	// stale (reaped), and the reap is committed.
	_, err := tree.Claim(bg, fence.ClaimRequest{Token: c.Token, Agent: "a"})
	se := staleErr(t, err)
	if se.Reason != fence.ReasonStaleToken || se.LostBy != "reaped" || !se.LostAt.Equal(c.Deadline) || se.Current != 0 || se.State != record.Available {
		t.Errorf("restore of an expired token: %+v", *se)
	}
	v, _ := tree.Show(bg, "t1")
	if v.Task.State != record.Available || v.Task.Attempts != 1 {
		t.Errorf("after the reap: %s with %d attempts", v.Task.State, v.Task.Attempts)
	}
}

func TestTree_HeartbeatKeepsLeaseAlive(t *testing.T) {
	tree := clockTree(t)
	add(t, tree, "t1", 0)
	c := claimTTL(t, tree, "t1", "a", time.Minute)
	setNow(t, base.Add(50*time.Second))
	hb, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "t1", Token: c.Token})
	if err != nil {
		t.Fatal(err)
	}
	if want := base.Add(50*time.Second + time.Minute); !hb.Task.Lease.Deadline.Equal(want) {
		t.Errorf("deadline after heartbeat = %v, want %v (now + the claim's 1m)", hb.Task.Lease.Deadline, want)
	}
	setNow(t, base.Add(70*time.Second)) // past the first deadline
	if _, err := tree.Verify(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
		t.Errorf("Verify after a heartbeat, past the first deadline: %v", err)
	}
	if r, err := tree.Reap(bg, false); err != nil || len(r) != 0 {
		t.Errorf("Reap of a live lease: %+v, %v", r, err)
	}
	setNow(t, base.Add(110*time.Second))
	se := staleErr(t, func() error { _, err := tree.Verify(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); return err }())
	if se.Reason != fence.ReasonLeaseExpired {
		t.Errorf("at the renewed deadline: %+v", *se)
	}
}

func TestTree_StatusTimeLeft(t *testing.T) {
	tree := clockTree(t)
	add(t, tree, "t1", 0)
	claimTTL(t, tree, "t1", "a", 5*time.Minute)
	for _, tc := range []struct {
		at   time.Duration
		left time.Duration
	}{{2 * time.Minute, 3 * time.Minute}, {6 * time.Minute, -time.Minute}} {
		setNow(t, base.Add(tc.at))
		st, err := tree.Status(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Leases) != 1 || st.Leases[0].Left != tc.left {
			t.Errorf("at +%v: leases %+v, want %v left", tc.at, st.Leases, tc.left)
		}
	}
}

func TestTree_ReapCountsAttempts(t *testing.T) {
	tree := clockTree(t)
	if _, err := tree.Add(bg, fence.AddRequest{ID: "t1", MaxAttempts: 2, Content: strings.NewReader("content of t1")}); err != nil {
		t.Fatal(err)
	}
	c1 := claimTTL(t, tree, "t1", "a", time.Minute)
	setNow(t, base.Add(90*time.Second))
	before := snap(t, tree)
	dry, err := tree.Reap(bg, true)
	if err != nil {
		t.Fatal(err)
	}
	want := fence.Reaped{Task: "t1", Holder: "a", Token: c1.Token, ExpiredFor: 30 * time.Second, Reason: fence.ReasonExpiredLease, Attempts: 1, MaxAttempts: 2, To: record.Available}
	if len(dry) != 1 || dry[0] != want {
		t.Errorf("reap --dry-run = %+v, want [%+v]", dry, want)
	}
	unchanged(t, tree, before, "reap --dry-run")
	reaped, err := tree.Reap(bg, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(reaped) != 1 || reaped[0] != want {
		t.Errorf("reap = %+v, want [%+v]", reaped, want)
	}
	fileAt(t, tree, "t1", record.Available)
	if again, err := tree.Reap(bg, false); err != nil || len(again) != 0 {
		t.Errorf("second reap = %+v, %v; want nothing", again, err)
	}
	// The reaped token is stale, and says when and how it was lost.
	se := staleErr(t, func() error {
		_, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "t1", Token: c1.Token})
		return err
	}())
	if se.Reason != fence.ReasonStaleToken || se.LostBy != "reaped" || !se.LostAt.Equal(base.Add(90*time.Second)) || se.State != record.Available {
		t.Errorf("heartbeat with the reaped token: %+v", *se)
	}

	// Second attempt expires too: the claim that reaps it finds it failed.
	c2 := claim(t, tree, "t1", "b")
	if c2.Token <= c1.Token {
		t.Errorf("second claim's token %d not above the first's %d", c2.Token, c1.Token)
	}
	setNow(t, c2.Deadline)
	res, err := tree.Claim(bg, fence.ClaimRequest{Agent: "c"})
	if !errors.Is(err, fence.ErrNothingToClaim) {
		t.Fatalf("claim after the last attempt expired: %+v, %v; want ErrNothingToClaim", res, err)
	}
	if len(res.Reaped) != 1 || res.Reaped[0].Task != "t1" || res.Reaped[0].To != record.Failed || res.Reaped[0].Attempts != 2 {
		t.Errorf("claim's reaps = %+v, want t1 to failed at 2 attempts", res.Reaped)
	}
	v, _ := tree.Show(bg, "t1")
	if v.Task.State != record.Failed || v.Task.Attempts != 2 {
		t.Errorf("t1 = %s with %d attempts, want failed with 2", v.Task.State, v.Task.Attempts)
	}
	fileAt(t, tree, "t1", record.Failed)
	// Requeue resets attempts: one more expiry does not fail it.
	if _, err := tree.Requeue(bg, "t1", "op", ""); err != nil {
		t.Fatal(err)
	}
	c3 := claimTTL(t, tree, "t1", "d", time.Minute)
	setNow(t, c3.Deadline.Add(time.Second))
	if r, err := tree.Reap(bg, false); err != nil || len(r) != 1 || r[0].To != record.Available || r[0].Attempts != 1 {
		t.Errorf("reap after requeue = %+v, %v; want t1 back to available at 1 attempt", r, err)
	}
}

func TestTree_ClaimReapsFirstAndReclaims(t *testing.T) {
	tree := clockTree(t)
	add(t, tree, "t1", 0)
	a := claimTTL(t, tree, "t1", "a", time.Minute)
	setNow(t, a.Deadline)
	b := claim(t, tree, "", "b")
	if b.Task.ID != "t1" || b.Token <= a.Token {
		t.Fatalf("claim after expiry = %+v", b)
	}
	if len(b.Reaped) != 1 || b.Reaped[0].Token != a.Token || b.Reaped[0].Holder != "a" {
		t.Errorf("Reaped = %+v", b.Reaped)
	}
	fileAt(t, tree, "t1", record.Claimed)
	evs, _ := tree.Log(bg, fence.LogFilter{Task: "t1"})
	var types []record.EventType
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if want := []record.EventType{record.EvAdd, record.EvClaim, record.EvReap, record.EvClaim}; len(types) != 4 || types[2] != want[2] || types[3] != want[3] {
		t.Errorf("events = %v, want %v", types, want)
	}
	before := snap(t, tree)
	se := staleErr(t, func() error {
		_, err := tree.Complete(bg, fence.FencedRequest{ID: "t1", Token: a.Token, Agent: "a"})
		return err
	}())
	want := fence.StaleTokenError{Reason: fence.ReasonStaleToken, Task: "t1", Yours: a.Token, Current: b.Token, Holder: "b",
		HeldSince: b.Task.Lease.ClaimedAt, State: record.Claimed, LostAt: a.Deadline, LostBy: "reaped"}
	if !se.LostAt.Equal(want.LostAt) {
		t.Errorf("LostAt = %v, want %v", se.LostAt, want.LostAt)
	}
	se.LostAt, want.LostAt = time.Time{}, time.Time{}
	if *se != want {
		t.Errorf("complete with the reaped token:\n  %+v\nwant\n  %+v", *se, want)
	}
	unchanged(t, tree, before, "complete with a reaped token")
}

// Every fenced call with a token lost to a reap is refused as stale.
func TestTree_ReapedTokenRefusedEverywhere(t *testing.T) {
	for _, op := range fencedOps {
		t.Run(op.name, func(t *testing.T) {
			tree := clockTree(t)
			add(t, tree, "t1", 0)
			a := claimTTL(t, tree, "t1", "a", time.Minute)
			setNow(t, a.Deadline.Add(time.Second))
			if _, err := tree.Reap(bg, false); err != nil {
				t.Fatal(err)
			}
			before := snap(t, tree)
			se := staleErr(t, op.call(tree, fence.FencedRequest{ID: "t1", Token: a.Token, Agent: "a"}))
			want := fence.StaleTokenError{Reason: fence.ReasonStaleToken, Task: "t1", Yours: a.Token, State: record.Available, LostBy: "reaped"}
			if !se.LostAt.Equal(a.Deadline.Add(time.Second)) {
				t.Errorf("LostAt = %v, want the reap's time", se.LostAt)
			}
			se.LostAt = time.Time{}
			if *se != want {
				t.Errorf("StaleTokenError =\n  %+v\nwant\n  %+v", *se, want)
			}
			unchanged(t, tree, before, op.name)
		})
	}
}

func TestTree_TokensIncreaseWhenClockStandsStillOrGoesBack(t *testing.T) {
	tree := clockTree(t)
	var last uint64
	for i, at := range []time.Duration{0, 0, 0, -time.Hour, -time.Hour, time.Second} {
		setNow(t, base.Add(at))
		id := string(rune('a' + i))
		add(t, tree, id, 0)
		c := claim(t, tree, id, "x")
		if c.Token <= last {
			t.Fatalf("claim %d at %v: token %d not above %d", i, at, c.Token, last)
		}
		if i == 0 && c.Token <= uint64(base.UnixMicro()) {
			t.Errorf("first token %d not above the clock at init (%d µs)", c.Token, base.UnixMicro())
		}
		last = c.Token
	}
}

// A tree rebuilt later (a lost journal re-inited) never re-issues a token an
// old agent may still hold.
func TestTree_FreshTreeStartsAboveOldTokens(t *testing.T) {
	old := clockTree(t)
	add(t, old, "t1", 0)
	var last uint64
	for i := 0; i < 5; i++ {
		c := claim(t, old, "t1", "a")
		if _, err := old.Release(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
			t.Fatal(err)
		}
		last = c.Token
	}
	setNow(t, base.Add(time.Second))
	fresh := newTree(t)
	add(t, fresh, "t1", 0)
	if c := claim(t, fresh, "t1", "a"); c.Token <= last {
		t.Errorf("fresh tree's first token %d not above the old tree's %d", c.Token, last)
	}
}
