package fence_test

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// A long-lived process (run --loop, mcp, a library agent) must refresh
// the ceiling's witness as often as one-shot commands do: when the
// witness it last read is WitnessRefresh old, not WitnessRefresh after it
// read it. Otherwise a loop that first read a witness 9 s old issued
// tokens for 10 s more without one, and a restore of a backup taken in
// between handed those tokens out again. Tokens here follow the counter
// (a host with its clock two hours ahead claimed first), as they do after
// a recover.
func TestWitness_LongLivedHandleRefreshesByTheWitnessAge(t *testing.T) {
	d := record.Defaults{TTL: time.Hour, MaxAttempts: 3}
	base := time.Now().UTC().Truncate(time.Second)
	type rig struct {
		root            string
		open            func(clock func() time.Time) *fence.Tree
		backup, restore func()
	}
	backends := map[string]func(t *testing.T) rig{
		"bbolt": func(t *testing.T) rig {
			root := filepath.Join(t.TempDir(), "tree")
			if _, err := fence.InitTree(root, d, fence.Options{Clock: func() time.Time { return base }}); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(root, ".fence", "journal.db")
			saved := filepath.Join(t.TempDir(), "backup.db")
			copyFile := func(from, to string) {
				b, err := os.ReadFile(from)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(to, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			return rig{
				root: root,
				open: func(clock func() time.Time) *fence.Tree {
					tree, err := fence.Open(root, fence.Options{Timeout: 10 * time.Second, Clock: clock})
					if err != nil {
						t.Fatal(err)
					}
					return tree
				},
				backup:  func() { copyFile(db, saved) },
				restore: func() { copyFile(saved, db) },
			}
		},
		"etcd": func(t *testing.T) rig {
			r := newEtcdRig(t, 1, d)
			saved := filepath.Join(t.TempDir(), "backup.db")
			return rig{
				root: r.root,
				open: func(clock func() time.Time) *fence.Tree {
					tree, err := fence.Open(r.root, fence.Options{Timeout: 10 * time.Second, Clock: clock})
					if err != nil {
						t.Fatal(err)
					}
					return tree
				},
				backup: func() {
					if err := r.c.Snapshot(saved); err != nil {
						t.Fatal(err)
					}
				},
				restore: func() {
					if err := r.c.Restore(saved, 0); err != nil {
						t.Fatal(err)
					}
				},
			}
		},
	}
	for name, mk := range backends {
		t.Run(name, func(t *testing.T) {
			r := mk(t)
			at := func(d time.Duration) func() time.Time { return func() time.Time { return base.Add(d) } }
			once := func(clock func() time.Time, id string) uint64 {
				t.Helper()
				tree := r.open(clock)
				defer tree.Close()
				var tok uint64
				err := untilOK(new(atomic.Int64), func() error {
					res, err := tree.Claim(bg, fence.ClaimRequest{ID: id, Agent: "once"})
					tok = res.Token
					return err
				})
				if err != nil {
					t.Fatalf("claim %s: %v", id, err)
				}
				return tok
			}
			setup := r.open(at(0))
			for _, id := range []string{"t0", "t1", "t2", "t3", "t4", "t5"} {
				add(t, setup, id, 0)
			}
			setup.Close()

			once(at(2*time.Hour), "t0") // the counter runs two hours ahead of the clock
			once(at(0), "t1")           // the witness, written at +0 s

			// The loop's clock, moved by hand.
			var loopNow atomic.Int64
			loopNow.Store(int64(9 * time.Second))
			loop := r.open(func() time.Time { return base.Add(time.Duration(loopNow.Load())) })
			defer loop.Close()
			loopClaim := func(id string) uint64 {
				t.Helper()
				res, err := loop.Claim(bg, fence.ClaimRequest{ID: id, Agent: "loop"})
				if err != nil {
					t.Fatalf("loop claim %s: %v", id, err)
				}
				return res.Token
			}
			loopClaim("t2") // reads the files: the witness is 9 s old
			r.backup()
			loopNow.Store(int64(14 * time.Second))
			lost := loopClaim("t3")
			loopNow.Store(int64(16 * time.Second))
			lost = max(lost, loopClaim("t4"))
			loop.Close()

			r.restore()
			if tok := once(at(17*time.Second), "t5"); tok <= lost {
				t.Fatalf("after the restore a claim got token %d, not above %d, which the loop was issued after the backup", tok, lost)
			}
		})
	}
}
