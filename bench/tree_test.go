package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// taskID names the i-th task of a benchmark tree.
func taskID(i int) string { return fmt.Sprintf("t%07d", i) }

// buildTree makes a tree at dir with n empty, available tasks, fast: the
// task files are created straight in available/ (no fsync each) and one
// `replay` adopts them all in one journal commit, with no move and no
// per-file sync (they are already where an available task lives). Adding
// them one by one would be n durable commits. One more task is then
// claimed and completed, so that the last commit is a small one and no
// timed writer pays for checking that the big adoption was mirrored, and
// everything is synced to disk.
func buildTree(dir string, n int) error {
	if _, err := fence.Init(dir, record.Defaults{TTL: fence.DefaultTTL, MaxAttempts: fence.DefaultMaxAttempts}); err != nil {
		return err
	}
	if err := createEmpty(filepath.Join(dir, "available"), n+1); err != nil {
		return err
	}
	tree, err := fence.Open(dir, fence.Options{})
	if err != nil {
		return err
	}
	defer tree.Close()
	ctx := context.Background()
	rep, err := tree.Replay(ctx, false)
	if err != nil {
		return fmt.Errorf("replay to adopt %d tasks: %w", n+1, err)
	}
	if left := rep.Unfixed(); left > 0 {
		return fmt.Errorf("replay left %d findings unfixed", left)
	}
	c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "warm-up"})
	if err != nil {
		return fmt.Errorf("warm-up claim: %w", err)
	}
	if _, err := tree.Complete(ctx, fence.FencedRequest{ID: c.Task.ID, Token: c.Token}); err != nil {
		return fmt.Errorf("warm-up complete: %w", err)
	}
	// The task files were created without fsync: write them (and the rest
	// of the build) out now, so the first timed fsync does not pay for it.
	unix.Sync()
	return nil
}

// createEmpty creates n empty files taskID(0..n-1) in dir.
func createEmpty(dir string, n int) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	for i := 0; i < n; i++ {
		fd, err := unix.Openat(int(d.Fd()), taskID(i), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("create %s/%s: %w", dir, taskID(i), err)
		}
		unix.Close(fd)
	}
	return nil
}

// newTree makes a tree with n available tasks in a fresh temporary
// directory, removed when b ends.
func newTree(b *testing.B, n int) string {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "tree")
	if err := buildTree(dir, n); err != nil {
		b.Fatal(err)
	}
	return dir
}

// openTree opens the tree at dir for the library benchmarks.
func openTree(b *testing.B, dir string) *fence.Tree {
	b.Helper()
	tree, err := fence.Open(dir, fence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tree.Close() })
	return tree
}
