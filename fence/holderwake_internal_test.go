package fence

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal/record"
)

// tiedTrees makes a tree with tasks t1..tn and opens it twice: holder
// claims t1 tied to its process (as run does) and keeps it with a keeper
// that only its watch can wake (check interval and tick an hour); other
// is a second process's view of the same tree.
func tiedTrees(t *testing.T, n int, watchLater bool) (holder, other *Tree, k *LeaseKeeper, c ClaimResult) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if _, err := Init(dir, record.Defaults{TTL: time.Hour, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	open := func() *Tree {
		tree, err := Open(dir, Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tree.Close() })
		return tree
	}
	holder, other = open(), open()
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		if _, err := other.Add(ctx, AddRequest{ID: "t" + string(rune('0'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := holder.Claim(ctx, ClaimRequest{ID: "t1", Agent: "a", TTL: time.Hour, TieToProcess: true})
	if err != nil || c.Tie == nil {
		t.Fatalf("tied claim: %v (tie %v, %v)", err, c.Tie, c.TieErr)
	}
	k, err = holder.NewKeeper(KeeperConfig{
		Task: "t1", Token: c.Token, Agent: "a", Deadline: c.Deadline,
		CheckInterval: time.Hour, Tick: time.Hour, TieToProcess: true, Tie: c.Tie, WatchLater: watchLater,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return holder, other, k, c
}

func lostWithin(t *testing.T, k *LeaseKeeper, what string) {
	t.Helper()
	select {
	case <-k.Lost():
	case <-time.After(30 * time.Second):
		t.Fatalf("the keeper did not hear of %s (its check interval is an hour)", what)
	}
}

// A revoke by another process wakes the holder's keeper: the revoker
// appends to the holder's liveness file, which the holder watches.
func TestHolderWake_RevokeByAnotherProcess(t *testing.T) {
	_, other, k, _ := tiedTrees(t, 1, false)
	if _, err := other.Revoke(context.Background(), "t1", "op", "test"); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, k, "a revoke by another process")
}

// A revoke through the holder's own Tree wakes its keeper in the process.
func TestHolderWake_RevokeInTheProcess(t *testing.T) {
	holder, _, k, _ := tiedTrees(t, 1, false)
	if _, err := holder.Revoke(context.Background(), "t1", "op", "test"); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, k, "a revoke in its own process")
}

// The command settling its task with the token (another process) ends
// the keeper's lease too.
func TestHolderWake_CompleteByTheCommand(t *testing.T) {
	_, other, k, c := tiedTrees(t, 1, false)
	if _, err := other.Complete(context.Background(), FencedRequest{ID: "t1", Token: c.Token, Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, k, "its task completed by another process")
}

// The storm the wake replaces: another process's claims and completes of
// other tasks wake the holder's keeper not once.
func TestHolderWake_OtherTasksWakeNobody(t *testing.T) {
	_, other, k, _ := tiedTrees(t, 6, false)
	ctx := context.Background()
	for range 5 {
		c, err := other.Claim(ctx, ClaimRequest{Agent: "b"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Heartbeat(ctx, FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: "b"}); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Complete(ctx, FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // a wake, if any, is a goroutine hop away
	if n := k.watchChecks.Load(); n != 0 {
		t.Fatalf("15 commits on other tasks woke the keeper %d times; want none", n)
	}
	if _, err := other.Revoke(ctx, "t1", "op", "test"); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, k, "a revoke after the storm")
}

// A keeper that starts its watch after its claim committed (run --loop's
// task in hand) sees a revoke that landed in between when Watch returns;
// with nothing in between, Watch reads nothing.
func TestHolderWake_WatchLaterSeesWhatCameBefore(t *testing.T) {
	t.Run("revoked before", func(t *testing.T) {
		_, other, k, _ := tiedTrees(t, 1, true)
		seenWhenWatched(t, other, k)
	})
	t.Run("nothing before", func(t *testing.T) {
		_, other, k, _ := tiedTrees(t, 2, true)
		ctx := context.Background()
		c, err := other.Claim(ctx, ClaimRequest{Agent: "b"}) // another task: no change to t1
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Watch(); err != nil {
			t.Fatal(err)
		}
		if n := k.watchChecks.Load(); n != 0 {
			t.Fatalf("Watch read the lease %d times with nothing changed; want none", n)
		}
		if _, err := other.Revoke(ctx, c.Task.ID, "op", "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Revoke(ctx, "t1", "op", "test"); err != nil {
			t.Fatal(err)
		}
		lostWithin(t, k, "a revoke after Watch")
	})
}

// A recover replaces the journal and every lease in it: it wakes every
// holder, whose lease is gone.
func TestHolderWake_Recover(t *testing.T) {
	holder, _, k, _ := tiedTrees(t, 1, false)
	// A recover cut short leaves this mark: the next one rebuilds.
	if err := os.WriteFile(filepath.Join(holder.metaDir, recoveringName), []byte("a recover began\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(holder.Root(), record.Defaults{TTL: time.Hour, MaxAttempts: 3}, Options{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, k, "a recover")
}

// A wake writes to ties only: a file in .fence/live named like a tie of
// the revoked token but not a link to the anchor its name says (a hand's
// hard link to some other file, a stray copy) is left as it was.
func TestHolderWake_WritesOnlyToTies(t *testing.T) {
	_, other, k, c := tiedTrees(t, 1, false)
	liveDir := filepath.Join(other.metaDir, liveDirName)
	victim := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(victim, []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	suffix := strings.TrimPrefix(c.Tie.anchor.name, anchorPrefix)
	tok := strconv.FormatUint(c.Token, 10)
	// A link named as a tie of the real anchor, and one of an anchor
	// that does not exist.
	for _, name := range []string{tok + "." + suffix + unstartedMark, tok + ".nosuchanchor"} {
		if err := os.Link(victim, filepath.Join(liveDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Revoke(context.Background(), "t1", "op", "test"); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, k, "a revoke")
	if b, err := os.ReadFile(victim); err != nil || string(b) != "mine\n" {
		t.Fatalf("a file linked into .fence/live under a tie's name now reads %q (%v); want it untouched", b, err)
	}
}

// A change by the holder's own process before its keeper listens (a
// keeper that starts its watch later) is seen when Watch returns, as one
// by another process is: it grows no anchor, so it is noted in the
// process.
func TestHolderWake_WatchLaterSeesItsOwnProcessBefore(t *testing.T) {
	holder, _, k, _ := tiedTrees(t, 1, true)
	seenWhenWatched(t, holder, k)
}

// seenWhenWatched revokes t1 through revoker before k (started with
// WatchLater) watches, and fails unless Watch returns with it seen.
func seenWhenWatched(t *testing.T, revoker *Tree, k *LeaseKeeper) {
	t.Helper()
	if _, err := revoker.Revoke(context.Background(), "t1", "op", "test"); err != nil {
		t.Fatal(err)
	}
	if err := k.Watch(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.Lost():
	default:
		t.Fatal("Watch returned with the revoke that came before it unseen")
	}
}
