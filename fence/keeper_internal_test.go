package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

// keeperTree makes a tree with one claimed task and a keeper for it.
func keeperTree(t *testing.T, cfg KeeperConfig) (*Tree, *LeaseKeeper, ClaimResult) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if _, err := Init(dir, record.Defaults{TTL: time.Hour, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	tree, err := Open(dir, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tree.Close() })
	ctx := context.Background()
	if _, err := tree.Add(ctx, AddRequest{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	c, err := tree.Claim(ctx, ClaimRequest{Agent: "a", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Task, cfg.Token, cfg.Agent, cfg.Deadline = c.Task.ID, c.Token, "a", c.Deadline
	k, err := tree.NewKeeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tree, k, c
}

func TestKeeper_DefaultsAndIdle(t *testing.T) {
	_, k, _ := keeperTree(t, KeeperConfig{})
	if k.cfg.Interval < 19*time.Minute || k.cfg.Interval > 21*time.Minute {
		t.Errorf("default interval %s, want about ttl/3 = 20m", k.cfg.Interval)
	}
	if k.cfg.CheckInterval != DefaultCheckInterval || k.cfg.Tick != DefaultKeeperTick {
		t.Errorf("defaults not applied: %+v", k.cfg)
	}
	step, err := k.runOnce(context.Background(), time.Now(), false)
	if step != stepIdle || err != nil {
		t.Errorf("runOnce right after start = %v, %v; want idle", step, err)
	}
}

func TestKeeper_HeartbeatWhenDue(t *testing.T) {
	_, k, c := keeperTree(t, KeeperConfig{})
	step, err := k.runOnce(context.Background(), time.Now().Add(21*time.Minute), false)
	if step != stepHeartbeat || err != nil {
		t.Fatalf("runOnce with a heartbeat due = %v, %v; want a heartbeat", step, err)
	}
	if !k.Deadline().After(c.Deadline) {
		t.Errorf("deadline %s not extended past %s", k.Deadline(), c.Deadline)
	}
}

func TestKeeper_RevokeIsSeenOnJournalChange(t *testing.T) {
	tree, k, _ := keeperTree(t, KeeperConfig{})
	if _, err := tree.Revoke(context.Background(), "t1", "op", "test"); err != nil {
		t.Fatal(err)
	}
	step, err := k.runOnce(context.Background(), time.Now(), true)
	var stale *StaleTokenError
	if step != stepLost || !errors.As(err, &stale) || stale.LostBy != "revoked" {
		t.Fatalf("runOnce after a revoke = %v, %v; want lost (revoked)", step, err)
	}
	select {
	case <-k.Lost():
	default:
		t.Error("Lost() is not closed")
	}
	if !errors.As(k.Err(), &stale) {
		t.Errorf("Err() = %v", k.Err())
	}
}

func TestKeeper_BusyJournalPutsLeaseAtRisk(t *testing.T) {
	tree, k, c := keeperTree(t, KeeperConfig{StopBefore: 10 * time.Minute})
	lock, err := boltstore.AcquireLock(filepath.Join(tree.metaDir, boltstore.LockName), true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	// A heartbeat is due but the journal is busy: retry, not lost, while
	// there is time.
	step, err := k.runOnce(context.Background(), time.Now().Add(21*time.Minute), false)
	if step != stepRetry || !errors.Is(err, ErrBusy) {
		t.Fatalf("busy heartbeat with time left = %v, %v; want retry after busy", step, err)
	}
	// Past deadline - StopBefore with no heartbeat through: at risk.
	step, err = k.runOnce(context.Background(), c.Deadline.Add(-9*time.Minute), false)
	var risk *LeaseAtRiskError
	if step != stepLost || !errors.As(err, &risk) || !errors.Is(err, ErrBusy) {
		t.Fatalf("busy past the risk point = %v, %v; want lost, at risk, because busy", step, err)
	}
}

func TestKeeper_StartStop(t *testing.T) {
	_, k, _ := keeperTree(t, KeeperConfig{Tick: time.Millisecond})
	k.Stop() // before Start: must not block
	_, k2, _ := keeperTree(t, KeeperConfig{Tick: time.Millisecond})
	if err := k2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	k2.Stop()
	k2.Stop()
	if k2.Err() != nil {
		t.Errorf("a healthy keeper reports %v", k2.Err())
	}
}

// A second Start is an error, not a second loop: two loops would close the
// keeper's channels twice (a panic at Stop).
func TestKeeper_StartTwiceIsAnError(t *testing.T) {
	_, k, _ := keeperTree(t, KeeperConfig{Tick: time.Millisecond})
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := k.Start(context.Background()); !errors.Is(err, ErrKeeperStarted) {
		t.Fatalf("second Start = %v, want ErrKeeperStarted", err)
	}
	k.Stop()
	if k.Err() != nil {
		t.Errorf("a healthy keeper reports %v", k.Err())
	}
}

// openFiles counts this process's descriptors and its mappings of the
// journal file.
func openFiles(t *testing.T) (fds, journalMaps int) {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries), strings.Count(string(maps), boltstore.FileName)
}

// A keeper heartbeats for days: descriptors and journal mappings must stay
// flat, at one parked writer and one parked reader. Each heartbeat used to go through a fresh batcher that parked its
// journal handle and never closed it (about 90 heartbeats, 92 mappings).
func TestKeeper_HeartbeatsLeakNothing(t *testing.T) {
	tree, k, _ := keeperTree(t, KeeperConfig{})
	ctx := context.Background()
	now := time.Now()
	beat := func() {
		now = now.Add(21 * time.Minute)
		if step, err := k.runOnce(ctx, now, false); step != stepHeartbeat || err != nil {
			t.Fatalf("runOnce = %v, %v; want a heartbeat", step, err)
		}
	}
	for range 3 { // warm up: the tree's own parked handles, the runtime
		beat()
		if _, err := tree.Status(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fds, maps := openFiles(t)
	for range 200 {
		beat()
		// Interleave the tree's own writes and reads, as `run` does.
		if _, err := tree.Status(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fds2, maps2 := openFiles(t)
	// One parked writer and one parked reader per Tree, at most.
	if fds2 != fds || maps2 != maps || maps2 > 2 {
		t.Errorf("after 200 heartbeats: %d descriptors (was %d), %d journal mappings (was %d, want at most 2)", fds2, fds, maps2, maps)
	}
}

// A heartbeat with the keeper's token and a shorter TTL (the command under
// run heartbeating with FENCE_TTL, say) moves the deadline: the keeper
// learns it at its next check, not at its own next heartbeat.
func TestKeeper_FollowsDeadlineMovedByTheSameToken(t *testing.T) {
	tree, k, c := keeperTree(t, KeeperConfig{TTL: time.Hour, StopBefore: 10 * time.Minute})
	ctx := context.Background()
	if _, err := tree.Heartbeat(ctx, FencedRequest{ID: "t1", Token: c.Token, TTL: 40 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	step, err := k.runOnce(ctx, time.Now(), true)
	if step != stepCheck || err != nil {
		t.Fatalf("check after the shortening heartbeat = %v, %v; want a check", step, err)
	}
	if got := k.Deadline(); got.After(time.Now().Add(41*time.Minute)) || got.Before(time.Now().Add(39*time.Minute)) {
		t.Fatalf("keeper's deadline %s, want the lease's real one, about 40 minutes from now", got)
	}
	// The journal is busy from now on: the lease is at risk by the real
	// deadline (40m - 10m), not by the one the keeper's claim asked for.
	lock, err := boltstore.AcquireLock(filepath.Join(tree.metaDir, boltstore.LockName), true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	step, err = k.runOnce(ctx, time.Now().Add(31*time.Minute), false)
	var risk *LeaseAtRiskError
	if step != stepLost || !errors.As(err, &risk) {
		t.Fatalf("busy past the real deadline's risk point = %v, %v; want lost, at risk", step, err)
	}
	if _, ok := SettledByHolder(err); ok {
		t.Errorf("SettledByHolder(%v) = true for a lease at risk", err)
	}
	if !strings.Contains(err.Error(), "stopping before it runs out") {
		t.Errorf("a lease at risk before its deadline says %q, want it to say it stops before the end", err)
	}
}

// A keeper that looks only after its lease's deadline (its process was
// stopped, or starved of CPU, past it) says that the lease has ended and
// the task may be another agent's: "stopping before it runs out" was
// false then, and told an operator no overlap had happened (found from
// outside).
func TestKeeper_LookingPastTheDeadlineSaysTheLeaseEnded(t *testing.T) {
	tree, k, _ := keeperTree(t, KeeperConfig{TTL: time.Hour, StopBefore: time.Minute})
	lock, err := boltstore.AcquireLock(filepath.Join(tree.metaDir, boltstore.LockName), true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	step, err := k.runOnce(context.Background(), k.Deadline().Add(8*time.Second), false)
	var risk *LeaseAtRiskError
	if step != stepLost || !errors.As(err, &risk) {
		t.Fatalf("a look 8 s past the deadline = %v, %v; want lost, at risk", step, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "8s before this process could look") || !strings.Contains(msg, "may be another agent's") || strings.Contains(msg, "before it runs out") {
		t.Errorf("a look past the deadline says %q; want that the lease ended 8s before, and the task may be another's", msg)
	}
}

// A deadline moved so close that the next heartbeat would come too late
// makes the keeper heartbeat at once, with its own TTL.
func TestKeeper_HeartbeatsAtOnceWhenTheDeadlineComesTooSoon(t *testing.T) {
	tree, k, c := keeperTree(t, KeeperConfig{TTL: time.Hour, StopBefore: 10 * time.Minute})
	ctx := context.Background()
	if _, err := tree.Heartbeat(ctx, FencedRequest{ID: "t1", Token: c.Token, TTL: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	step, err := k.runOnce(ctx, time.Now(), true)
	if step != stepHeartbeat || err != nil {
		t.Fatalf("check after a 3s heartbeat = %v, %v; want a heartbeat at once", step, err)
	}
	if got := k.Deadline(); got.Before(time.Now().Add(59 * time.Minute)) {
		t.Errorf("deadline %s after the keeper's heartbeat, want its own hour back", got)
	}
}

// A lease settled with its own token (the command completing, releasing or
// failing its own task) ends the keeper, and says so: it was not lost.
func TestKeeper_SettledByTheHolder(t *testing.T) {
	for _, how := range []string{"completed", "released", "failed", "revoked"} {
		t.Run(how, func(t *testing.T) {
			tree, k, c := keeperTree(t, KeeperConfig{})
			ctx := context.Background()
			req := FencedRequest{ID: "t1", Token: c.Token}
			var err error
			switch how {
			case "completed":
				_, err = tree.Complete(ctx, req)
			case "released":
				_, err = tree.Release(ctx, req)
			case "failed":
				_, err = tree.Fail(ctx, req)
			case "revoked":
				_, err = tree.Revoke(ctx, "t1", "op", "test")
			}
			if err != nil {
				t.Fatal(err)
			}
			step, err := k.runOnce(ctx, time.Now(), true)
			if step != stepLost {
				t.Fatalf("runOnce after %s = %v, %v; want the keeper to end", how, step, err)
			}
			got, ok := SettledByHolder(k.Err())
			if want := how != "revoked"; ok != want || (ok && got != how) {
				t.Errorf("SettledByHolder = %q, %v; want %q, %v", got, ok, how, want)
			}
		})
	}
}

// Start sets the journal watch up before it returns: a revoke right after
// Start is seen at once, with no periodic check due.
func TestKeeper_WatchIsReadyWhenStartReturns(t *testing.T) {
	tree, k, _ := keeperTree(t, KeeperConfig{CheckInterval: time.Hour, Tick: time.Hour})
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	if _, err := tree.Revoke(context.Background(), "t1", "op", "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the keeper did not see the revoke through its watch")
	}
}

// An interval that reaches past the point where the holder must stop
// (possible when the lease length comes from the tree, not from the
// caller) is shortened: the keeper's own heartbeat wakes its journal
// watch, and the check that follows must not find another heartbeat due,
// or every heartbeat triggers the next (thousands a second).
func TestKeeper_OwnHeartbeatDoesNotTriggerTheNext(t *testing.T) {
	_, k, _ := keeperTree(t, KeeperConfig{TTL: time.Hour, Interval: 45 * time.Minute, StopBefore: 20 * time.Minute})
	ctx := context.Background()
	now := time.Now()
	if step, err := k.runOnce(ctx, now, true); step != stepHeartbeat || err != nil {
		t.Fatalf("first check with a too-long interval = %v, %v; want one heartbeat", step, err)
	}
	for i := range 3 {
		if step, err := k.runOnce(ctx, now, true); step != stepCheck || err != nil {
			t.Fatalf("check %d after the keeper's own heartbeat = %v, %v; want a check, no heartbeat", i, step, err)
		}
	}
}

// startKeeper claims task id on tree and starts a keeper on its lease that
// only its journal watch can wake (no periodic check, no tick).
func startKeeper(t *testing.T, tree *Tree, id string) *LeaseKeeper {
	t.Helper()
	ctx := context.Background()
	if _, err := tree.Add(ctx, AddRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	c, err := tree.Claim(ctx, ClaimRequest{ID: id, Agent: "a", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	k, err := tree.NewKeeper(KeeperConfig{Task: id, Token: c.Token, Agent: "a", Deadline: c.Deadline, CheckInterval: time.Hour, Tick: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

// seesRevoke revokes k's task and waits for k to say so: through its
// watch, since its check interval and tick are an hour.
func seesRevoke(t *testing.T, tree *Tree, k *LeaseKeeper) {
	t.Helper()
	if _, err := tree.Revoke(context.Background(), k.cfg.Task, "op", "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost():
	case <-time.After(30 * time.Second):
		t.Fatalf("keeper of %s did not see the revoke through its watch", k.cfg.Task)
	}
}

// The keepers of one Tree share one journal watch: closing an inotify
// instance waits for the kernel's grace period (up to 20 ms), which `run
// --loop` paid between every two tasks when each keeper had its own. The
// watch outlives each keeper and still wakes every later one.
func TestKeeper_KeepersShareOneWatch(t *testing.T) {
	tree, k, _ := keeperTree(t, KeeperConfig{CheckInterval: time.Hour, Tick: time.Hour})
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.Stop()
	hub := &tree.batch.watch
	hub.mu.Lock()
	first := hub.w
	hub.mu.Unlock()
	if first == nil {
		t.Fatal("no shared watch after a keeper's Start and Stop")
	}
	// A read parks the tree's reader (one descriptor, kept for the next
	// read): have it parked before counting.
	if _, err := tree.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	fds, _ := openFiles(t)
	for i := range 20 {
		k := startKeeper(t, tree, fmt.Sprintf("s%d", i))
		if i%5 == 0 {
			seesRevoke(t, tree, k)
		}
		k.Stop()
	}
	hub.mu.Lock()
	same, subs := hub.w == first, len(hub.subs)
	hub.mu.Unlock()
	if !same {
		t.Error("a later keeper set up a watch of its own")
	}
	if subs != 0 {
		t.Errorf("%d keepers still subscribed after Stop", subs)
	}
	if fds2, _ := openFiles(t); fds2 != fds {
		t.Errorf("%d descriptors after 20 keepers, %d before", fds2, fds)
	}
	tree.Close()
	hub.mu.Lock()
	closed := hub.w == nil && hub.closed
	hub.mu.Unlock()
	if !closed {
		t.Error("Tree.Close left the shared watch open")
	}
}

// The watch is on the journal's file: when the file is replaced (recover
// puts a new one in place), the next keeper sets up a watch on the new
// one, and a keeper already running is woken to re-read its lease.
func TestKeeper_SharedWatchFollowsAReplacedJournal(t *testing.T) {
	tree, k, _ := keeperTree(t, KeeperConfig{CheckInterval: time.Hour, Tick: time.Hour})
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	before := startKeeper(t, tree, "s0")
	// The tree's parked journal handle would be closed when the next
	// write finds the file replaced, and that close alone wakes a watch
	// on the old file: close it first.
	if db := tree.batch.takeIdle(); db != nil {
		db.Close()
	}
	path := tree.store.Path(tree.metaDir)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	after := startKeeper(t, tree, "s1")
	seesRevoke(t, tree, after)
	// before was woken when the new watch went up; it re-read a lease
	// that still holds, and sees the next change through the new watch.
	seesRevoke(t, tree, before)
}

// A storm of journal writes does not make a keeper read the journal once
// per write: checks the watch wakes come at most every watchSpacing, and
// the last write of the storm is still checked (a revoke at its end is
// seen).
func TestKeeper_WriteStormIsCheckedSpaced(t *testing.T) {
	tree, k, _ := keeperTree(t, KeeperConfig{CheckInterval: time.Hour, Tick: time.Hour})
	ctx := context.Background()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	other := startKeeper(t, tree, "t2")
	other.Stop()
	c, err := tree.Claim(ctx, ClaimRequest{ID: "t2", Token: other.cfg.Token, Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	const writes = 300
	for range writes {
		if _, err := tree.Heartbeat(ctx, FencedRequest{ID: "t2", Token: c.Token, Agent: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	// Timing-free: however slow the machine, no two checks the watch
	// woke are closer than watchSpacing (each write used to wake one as
	// soon as the last was done).
	n, gap := k.watchChecks.Load(), time.Duration(k.watchMinGap.Load())
	if n == 0 || n > 1 && gap < watchSpacing {
		t.Fatalf("%d writes woke %d checks, the closest %v apart; want at least one, none closer than %v", writes, n, gap, watchSpacing)
	}
	seesRevoke(t, tree, k)
}
