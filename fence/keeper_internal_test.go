package fence

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
)

// keeperTree makes a tree with one claimed task and a keeper for it.
func keeperTree(t *testing.T, cfg KeeperConfig) (*Tree, *LeaseKeeper, ClaimResult) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if _, err := Init(dir, journal.Defaults{TTL: time.Hour, MaxAttempts: 3}); err != nil {
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
	if step != StepIdle || err != nil {
		t.Errorf("runOnce right after start = %v, %v; want idle", step, err)
	}
}

func TestKeeper_HeartbeatWhenDue(t *testing.T) {
	_, k, c := keeperTree(t, KeeperConfig{})
	step, err := k.runOnce(context.Background(), time.Now().Add(21*time.Minute), false)
	if step != StepHeartbeat || err != nil {
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
	if step != StepLost || !errors.As(err, &stale) || stale.LostBy != "revoked" {
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
	lock, err := journal.AcquireLock(filepath.Join(tree.metaDir, journal.LockName), true, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	// A heartbeat is due but the journal is busy: retry, not lost, while
	// there is time.
	step, err := k.runOnce(context.Background(), time.Now().Add(21*time.Minute), false)
	if step != StepRetry || !errors.Is(err, ErrBusy) {
		t.Fatalf("busy heartbeat with time left = %v, %v; want retry after busy", step, err)
	}
	// Past deadline - StopBefore with no heartbeat through: at risk.
	step, err = k.runOnce(context.Background(), c.Deadline.Add(-9*time.Minute), false)
	var risk *LeaseAtRiskError
	if step != StepLost || !errors.As(err, &risk) || !errors.Is(err, ErrBusy) {
		t.Fatalf("busy past the risk point = %v, %v; want lost, at risk, because busy", step, err)
	}
}

func TestKeeper_StartStop(t *testing.T) {
	_, k, _ := keeperTree(t, KeeperConfig{Tick: time.Millisecond})
	k.Stop() // before Start: must not block
	_, k2, _ := keeperTree(t, KeeperConfig{Tick: time.Millisecond})
	k2.Start(context.Background())
	k2.Stop()
	k2.Stop()
	if k2.Err() != nil {
		t.Errorf("a healthy keeper reports %v", k2.Err())
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
	return len(entries), strings.Count(string(maps), journal.FileName)
}

// A keeper heartbeats for days: descriptors and journal mappings must stay
// flat. Each heartbeat used to go through a fresh batcher that parked its
// journal handle and never closed it (about 90 heartbeats, 92 mappings).
func TestKeeper_HeartbeatsLeakNothing(t *testing.T) {
	tree, k, _ := keeperTree(t, KeeperConfig{})
	ctx := context.Background()
	now := time.Now()
	beat := func() {
		now = now.Add(21 * time.Minute)
		if step, err := k.runOnce(ctx, now, false); step != StepHeartbeat || err != nil {
			t.Fatalf("runOnce = %v, %v; want a heartbeat", step, err)
		}
	}
	for range 3 { // warm up: the tree's own parked handle, the runtime
		beat()
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
	if fds2 != fds || maps2 != maps || maps2 > 1 {
		t.Errorf("after 200 heartbeats: %d descriptors (was %d), %d journal mappings (was %d, want at most 1)", fds2, fds, maps2, maps)
	}
}
