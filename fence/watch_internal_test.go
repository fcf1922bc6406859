package fence

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

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

// TestWatchDirs_Arrivals: what wakes a waiting claim is an entry made or
// moved into available/ or inbox/, or a file there written to; an entry
// moved out (every claim moves one out of available/) or removed does
// not, or each claim would wake every waiter.
func TestWatchDirs_Arrivals(t *testing.T) {
	for op, want := range map[fsnotify.Op]bool{
		fsnotify.Create: true, fsnotify.Write: true, fsnotify.Create | fsnotify.Chmod: true,
		fsnotify.Rename: false, fsnotify.Remove: false, fsnotify.Chmod: false,
	} {
		if got := arrival(op); got != want {
			t.Errorf("arrival(%v) = %v, want %v", op, got, want)
		}
	}
}

// TestWatchDirs_NoSymlinks: a directory replaced by a symbolic link is
// not watched (fsnotify would follow it out of the tree): a waiting
// claim falls back to polling. A real directory is; Close is safe twice.
func TestWatchDirs_NoSymlinks(t *testing.T) {
	dir := t.TempDir()
	real, link := filepath.Join(dir, "real"), filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if w, err := watchDirs(real, link); err == nil {
		w.Close()
		t.Fatal("watchDirs followed a symbolic link")
	}
	w, err := watchDirs(real)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "t1"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C():
	case <-time.After(20 * time.Second):
		t.Fatal("no signal after a file was made in the directory")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
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
