package fence_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// A journal restored from a backup holds the leases of the day of the
// backup. A lease that ended after it (released, revoked, reaped) is
// current there again, and the agent that lost it, back with its old
// token, would be taken for the holder: its heartbeat kept the lease, its
// complete finished a task another agent had done since. The first write
// on the restored journal notices that it is behind the tokens it issued
// (the ceiling's witness, journal/witness.go) and ends every lease it
// holds before any step is judged, on both stores.
func TestRestoredJournal_EndsEveryLeaseItHolds(t *testing.T) {
	for _, store := range []string{"bbolt", "etcd"} {
		t.Run(store, func(t *testing.T) {
			var ticks atomic.Int64
			base := time.Now()
			clock := func() time.Time { return base.Add(time.Duration(ticks.Load())) }
			d := record.Defaults{TTL: time.Hour, MaxAttempts: 3}

			var (
				root            string
				backup, restore func()
				opts            fence.Options
			)
			switch store {
			case "bbolt":
				root = filepath.Join(t.TempDir(), "tree")
				if _, err := fence.InitTree(root, d, fence.Options{Clock: clock}); err != nil {
					t.Fatal(err)
				}
				db := filepath.Join(root, ".fence", "journal.db")
				copyPath := filepath.Join(t.TempDir(), "journal.db")
				backup = func() { copyFile(t, db, copyPath) }
				restore = func() {
					copyFile(t, copyPath, db+".restoring")
					if err := os.Rename(db+".restoring", db); err != nil {
						t.Fatal(err)
					}
				}
			case "etcd":
				r := newEtcdRig(t, 1, d)
				root = r.root
				snap := filepath.Join(t.TempDir(), "backup.db")
				backup = func() {
					if err := r.c.Snapshot(snap); err != nil {
						t.Fatal(err)
					}
				}
				restore = func() {
					if err := r.c.Restore(snap, 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			opts = fence.Options{Clock: clock, Timeout: 10 * time.Second}
			open := func() *fence.Tree {
				t.Helper()
				tree, err := fence.Open(root, opts)
				if err != nil {
					t.Fatal(err)
				}
				return tree
			}

			tree := open()
			for _, id := range []string{"t0", "t1", "t2"} {
				add(t, tree, id, 0)
			}
			lost := claim(t, tree, "t0", "old")
			kept := claim(t, tree, "t1", "keeper")
			tree.Close()
			backup()

			// After the backup, well past a witness refresh: the old
			// holder lets t0 go, and another agent claims it.
			ticks.Add(int64(2 * journal.WitnessRefresh))
			tree = open()
			if _, err := tree.Release(bg, fence.FencedRequest{ID: "t0", Token: lost.Token}); err != nil {
				t.Fatal(err)
			}
			taken := claim(t, tree, "t0", "new")
			tree.Close()
			restore()

			tree = open()
			defer tree.Close()
			// A read that judges the token (verify, the check before a
			// side effect) is the first step after the restore: it must
			// not call the dead token current.
			if err := untilOK(new(atomic.Int64), func() error {
				_, err := tree.Verify(bg, fence.FencedRequest{ID: "t0", Token: lost.Token})
				return err
			}); !errors.As(err, new(*fence.StaleTokenError)) {
				t.Fatalf("verify of the token released after the backup, first on the restored journal: %v, want a stale token refusal", err)
			}
			// The old holder wakes up with its token: refused, and so is
			// every lease the restored journal held (kept's too: nothing
			// tells a lease that lived on from one that ended after the
			// backup).
			for _, c := range []struct {
				name  string
				token uint64
				id    string
			}{{"the lease released after the backup", lost.Token, "t0"}, {"a lease held across the restore", kept.Token, "t1"}} {
				var err error
				err = untilOK(new(atomic.Int64), func() error {
					_, err := tree.Heartbeat(bg, fence.FencedRequest{ID: c.id, Token: c.token})
					return err
				})
				var stale *fence.StaleTokenError
				if !errors.As(err, &stale) {
					t.Fatalf("heartbeat of %s (token %d) on the restored journal: %v, want a stale token refusal", c.name, c.token, err)
				}
				if stale.Reason != fence.ReasonStaleToken || stale.LostBy != fence.LostByRestore || !strings.Contains(err.Error(), "restored from a backup") {
					t.Fatalf("heartbeat of %s: reason %q, lost by %q (%v); want %q, lost by %q, said so", c.name, stale.Reason, stale.LostBy, err, fence.ReasonStaleToken, fence.LostByRestore)
				}
			}
			for _, id := range []string{"t0", "t1"} {
				v, err := tree.Show(bg, id)
				if err != nil {
					t.Fatal(err)
				}
				if v.Task.State != record.Available || v.Task.Attempts != 0 {
					t.Fatalf("%s after the restore was noticed: %s with %d attempts, want available with none counted", id, v.Task.State, v.Task.Attempts)
				}
			}
			again := claim(t, tree, "t0", "next")
			if again.Token <= taken.Token {
				t.Fatalf("t0 claimed after the restore with token %d, not above %d, issued before it", again.Token, taken.Token)
			}
			if store == "bbolt" {
				checkInvariants(t, tree)
			}
		})
	}
}

// copyFile copies from to a new file at to, synced.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
