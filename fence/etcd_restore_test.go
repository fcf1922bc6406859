package fence_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// An etcd restored from a backup holds the journal of the day of the
// backup: its token counter is behind every token issued since. When the
// clock those tokens followed was ahead (a host whose clock ran fast),
// the restored journal would issue them again, to other claims, and an
// agent holding one would be taken for the new holder. The ceiling's
// witness (journal/witness.go) tells the restored journal from the live
// one, so its next token starts above the ceiling's files: above every
// token issued since the backup.
func TestEtcdRestore_TokensStayAboveEveryTokenIssued(t *testing.T) {
	for _, tc := range []struct {
		name string
		bump uint64 // etcdutl --bump-revision: the revision goes on, not back
		// longLived: a handle open across the restore claims first; else
		// only new processes claim, after writes that carry the restored
		// journal's revision past where it stood.
		longLived bool
	}{
		{"long-lived handle", 0, true},
		{"bumped revision, long-lived handle", 1_000_000, true},
		{"writes before the first claim", 0, false},
		{"bumped revision, writes before the first claim", 1_000_000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newEtcdRig(t, 1, record.Defaults{TTL: time.Minute, MaxAttempts: 3})
			// A cluster that has had a few elections: restarts, as in
			// any cluster's life.
			m := r.c.Members()[0]
			for range 2 {
				m.Stop()
				if err := m.Start(); err != nil {
					t.Fatal(err)
				}
			}
			tree := r.open(t, 10*time.Second)
			for _, id := range []string{"t0", "t1", "t2", "t3", "t4"} {
				add(t, tree, id, 0)
			}
			before := claim(t, tree, "t0", "a0")

			backup := filepath.Join(t.TempDir(), "backup.db")
			if err := r.c.Snapshot(backup); err != nil {
				t.Fatal(err)
			}

			// After the backup, a host whose clock is ten minutes fast
			// claims two tasks.
			fast, err := fence.Open(r.root, fence.Options{Timeout: 10 * time.Second, Clock: func() time.Time { return time.Now().Add(10 * time.Minute) }})
			if err != nil {
				t.Fatal(err)
			}
			lost := []fence.ClaimResult{claim(t, fast, "t1", "fast"), claim(t, fast, "t2", "fast")}
			fast.Close()
			// The long-lived handle reads the journal as it stands now.
			if _, err := tree.Status(bg); err != nil {
				t.Fatal(err)
			}
			highest := max(before.Token, lost[0].Token, lost[1].Token)

			if err := r.c.Restore(backup, tc.bump); err != nil {
				t.Fatal(err)
			}

			// The long-lived handle (first: it saw the journal further on
			// than the restore put it) and a new agent (its own handle, a
			// correct clock) claim after the restore: every token is above
			// every token issued before it.
			var got []uint64
			if tc.longLived {
				err = untilOK(new(atomic.Int64), func() error {
					res, err := tree.Claim(bg, fence.ClaimRequest{ID: "t4", Agent: "c"})
					got = append(got, res.Token)
					return err
				})
				if err != nil {
					t.Fatalf("claim of the long-lived handle after the restore: %v", err)
				}
			}
			fresh := r.open(t, 10*time.Second)
			if !tc.longLived {
				for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
					if err := untilOK(new(atomic.Int64), func() error { _, err := fresh.Add(bg, fence.AddRequest{ID: id}); return err }); err != nil {
						t.Fatal(err)
					}
				}
			}
			err = untilOK(new(atomic.Int64), func() error {
				res, err := fresh.Claim(bg, fence.ClaimRequest{ID: "t3", Agent: "b"})
				got = append(got, res.Token)
				return err
			})
			if err != nil {
				t.Fatalf("claim after the restore: %v", err)
			}
			for _, tok := range got {
				if tok != 0 && tok <= highest {
					t.Fatalf("a claim after the restore got token %d, not above %d, a token issued before it (issued: %d %d %d)", tok, highest, before.Token, lost[0].Token, lost[1].Token)
				}
			}

			// The tasks the fast host claimed after the backup are
			// available in the restored journal; claimed again, their
			// new tokens refuse the fast host's old ones.
			again := claim(t, fresh, "t1", "b")
			if again.Token <= highest {
				t.Fatalf("t1 claimed again with token %d, not above %d", again.Token, highest)
			}
			_, err = fresh.Complete(bg, fence.FencedRequest{ID: "t1", Token: lost[0].Token})
			if stale := (*fence.StaleTokenError)(nil); !errors.As(err, &stale) {
				t.Fatalf("complete of t1 with the token issued before the restore: %v, want a stale token refusal", err)
			}
		})
	}
}

// The witness and the ceiling must not cry wolf: claims by several hosts
// at once, a fresh tree's first claims each raising the ceiling, clocks
// that make the witness stale again and again, each reading the files
// while the others' commits are in flight. A snapshot older than the
// commit that wrote what the files say is read again, not taken for a
// journal that lost tokens: no token jumps over the ceiling (2^32 µs).
func TestEtcdWitness_NoFalseAlarmsUnderContention(t *testing.T) {
	r := newEtcdRig(t, 1, record.Defaults{TTL: time.Minute, MaxAttempts: 3})
	setup := r.open(t, 10*time.Second)
	const agents, each = 4, 30
	for i := range agents * each {
		add(t, setup, fmt.Sprintf("t%03d", i), 0)
	}
	// Every reading of the clock moves it on by half a second: the
	// witness is stale at almost every claim, and the clock stays well
	// inside the ceiling.
	var ticks atomic.Int64
	base := time.Now()
	clock := func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Second / 2) }
	var (
		mu     sync.Mutex
		tokens []uint64
		wg     sync.WaitGroup
	)
	for a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tree, err := fence.Open(r.root, fence.Options{Timeout: 30 * time.Second, Clock: clock})
			if err != nil {
				t.Error(err)
				return
			}
			defer tree.Close()
			for range each {
				res, err := tree.Claim(bg, fence.ClaimRequest{Agent: fmt.Sprintf("a%d", a)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				tokens = append(tokens, res.Token)
				mu.Unlock()
				if _, err := tree.Complete(bg, fence.FencedRequest{ID: res.Task.ID, Token: res.Token}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(tokens)
	for i := 1; i < len(tokens); i++ {
		if gap := tokens[i] - tokens[i-1]; gap >= journal.CeilingStep/2 {
			t.Fatalf("tokens jumped by %d between %d and %d: a live journal was taken for a restored one", gap, tokens[i-1], tokens[i])
		}
	}
	if len(tokens) != agents*each {
		t.Fatalf("%d claims, want %d", len(tokens), agents*each)
	}
}

// A whole-tree restore on etcd: the cluster from a snapshot and the
// tree's ceiling files from the same moment. Nothing then knows the
// tokens issued since; AfterRestore (replay --restored) moves the counter
// above them.
func TestEtcdRestore_WholeTree(t *testing.T) {
	r := newEtcdRig(t, 1, record.Defaults{TTL: time.Minute, MaxAttempts: 3})
	tree := r.open(t, 10*time.Second)
	for _, id := range []string{"t0", "t1", "t2"} {
		add(t, tree, id, 0)
	}
	claim(t, tree, "t0", "a0")
	tree.Close()
	backup := filepath.Join(t.TempDir(), "backup.db")
	if err := r.c.Snapshot(backup); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, p := range journal.CeilingPaths(filepath.Join(r.root, ".fence")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = b
	}
	// After the backup, a host whose clock is ten minutes fast claims.
	fast, err := fence.Open(r.root, fence.Options{Timeout: 10 * time.Second, Clock: func() time.Time { return time.Now().Add(10 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	lost := claim(t, fast, "t1", "fast")
	fast.Close()

	if err := r.c.Restore(backup, 0); err != nil {
		t.Fatal(err)
	}
	for p, b := range files {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	after := r.open(t, 10*time.Second)
	var counter uint64
	if err := untilOK(new(atomic.Int64), func() error { counter, err = after.AfterRestore(bg); return err }); err != nil {
		t.Fatal(err)
	}
	if counter <= lost.Token {
		t.Fatalf("after AfterRestore the counter is %d, not above %d, issued after the backup", counter, lost.Token)
	}
	if got := claim(t, after, "t2", "b"); got.Token <= lost.Token {
		t.Fatalf("claim after the restore got %d, not above %d", got.Token, lost.Token)
	}
}
