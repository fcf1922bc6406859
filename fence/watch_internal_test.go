package fence

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal/record"
)

// TestKeepTrying_WokenByArrival: a waiting claim whose try failed is
// woken by a task's file arriving in available/ (an add, a release…) or
// inbox/ (a drop), not by a poll: with the poll and the backstop set to
// an hour, it still tries again at once.
func TestKeepTrying_WokenByArrival(t *testing.T) {
	defer func(p, b time.Duration) { pollInterval, wakeBackstop = p, b }(pollInterval, wakeBackstop)
	pollInterval, wakeBackstop = time.Hour, time.Hour
	root := filepath.Join(t.TempDir(), "tree")
	if _, err := InitTree(root, record.Defaults{TTL: time.Minute, MaxAttempts: 3}, Options{}); err != nil {
		t.Fatal(err)
	}
	tree, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	for _, dir := range []string{"available", "inbox"} {
		t.Run(dir, func(t *testing.T) {
			w, stop := tree.waitWake(time.Hour)
			defer stop()
			if w.c == nil {
				t.Fatal("no watch on available/ and inbox/")
			}
			firstFailed := make(chan struct{})
			done := make(chan error, 1)
			tries := 0
			go func() {
				_, err := keepTrying(context.Background(), time.Hour, w, func() (int, error) {
					tries++
					if tries == 1 {
						defer close(firstFailed)
						return 0, ErrNothingToClaim
					}
					return tries, nil
				}, func(err error) bool { return err == ErrNothingToClaim })
				done <- err
			}()
			<-firstFailed
			tmp := filepath.Join(root, ".fence", "tmp", "arrival")
			if err := os.WriteFile(tmp, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(root, dir, "arrival")); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(filepath.Join(root, dir, "arrival"))
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the waiting claim was not woken by the arrival")
			}
		})
	}
}

// TestClaimWait_WokenWhenDue: a task scheduled for later moves no file
// until a write finds it due, so no watch sees it: a waiting claim sets a
// timer to the earliest scheduled time instead. With the poll and the
// backstop set to an hour it still takes the task once it is due, long
// before its context runs out.
func TestClaimWait_WokenWhenDue(t *testing.T) {
	defer func(p, b time.Duration) { pollInterval, wakeBackstop = p, b }(pollInterval, wakeBackstop)
	pollInterval, wakeBackstop = time.Hour, time.Hour
	root := filepath.Join(t.TempDir(), "tree")
	if _, err := InitTree(root, record.Defaults{TTL: time.Minute, MaxAttempts: 3}, Options{}); err != nil {
		t.Fatal(err)
	}
	tree, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	if _, err := tree.Add(context.Background(), AddRequest{ID: "soon", Delay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := tree.Claim(ctx, ClaimRequest{Agent: "a", Wait: time.Hour})
	if err != nil {
		t.Fatalf("claim --wait of a task due soon: %v (not woken when it came due)", err)
	}
	if res.Task.ID != "soon" {
		t.Fatalf("claimed %s; want soon", res.Task.ID)
	}
}
