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
