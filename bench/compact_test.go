package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// buildFinishedTree makes a tree of n tasks that each lived a full life:
// added (adopted), claimed and completed, in batches of fence.MaxBatch
// claims and one group commit of their completions.
func buildFinishedTree(dir string, n int) error {
	if err := buildTree(dir, n-1); err != nil {
		return err
	}
	tree, err := fence.Open(dir, fence.Options{})
	if err != nil {
		return err
	}
	defer tree.Close()
	ctx := context.Background()
	for {
		res, err := tree.ClaimBatch(ctx, fence.BatchClaimRequest{Count: fence.MaxBatch, Agent: "builder"})
		if err != nil {
			if errors.Is(err, fence.ErrNothingToClaim) {
				return nil
			}
			return fmt.Errorf("claim a batch: %w", err)
		}
		calls := make([]fence.GroupCall, len(res.Assigned))
		errs := make([]error, len(res.Assigned))
		for i, c := range res.Assigned {
			calls[i] = fence.GroupCall{Ctx: ctx, Fn: func(ctx context.Context) {
				_, errs[i] = tree.Complete(ctx, fence.FencedRequest{ID: c.Task.ID, Token: c.Token})
			}}
		}
		tree.Together(calls...)
		for _, err := range errs {
			if err != nil {
				return fmt.Errorf("complete: %w", err)
			}
		}
	}
}

// compactSize is the tree of the compaction rows: 100k tasks for the
// bytes per task, and the largest scale size (1M, or BENCH_MAX_TASKS) for
// replay.
func compactSize() int {
	sizes := scaleSizes()
	return sizes[len(sizes)-1]
}

// BenchmarkCompact_BytesPerTask is the bbolt journal's size per task after
// a full life cycle (add, claim, complete) of 100k tasks, before and after
// compact, and how long compact took.
func BenchmarkCompact_BytesPerTask(b *testing.B) {
	const n = 100000
	b.Run("tasks="+sizeName(n), func(b *testing.B) {
		for range b.N {
			dir := filepath.Join(b.TempDir(), "tree")
			b.StopTimer()
			if err := buildFinishedTree(dir, n); err != nil {
				b.Fatal(err)
			}
			before := fileSize(b, filepath.Join(dir, ".fence", "journal.db"))
			b.StartTimer()
			d, err := timed(func() error { return compactTree(dir) })
			if err != nil {
				b.Fatal(err)
			}
			after := fileSize(b, filepath.Join(dir, ".fence", "journal.db"))
			b.ReportMetric(float64(before)/n, "bytes/task-before")
			b.ReportMetric(float64(after)/n, "bytes/task-after")
			b.ReportMetric(d.Seconds(), "compact-s")
		}
	})
}

// BenchmarkCompact_Replay is replay --check of a tree of finished tasks
// (1M, each added, claimed and completed) before and after compact: the
// target is after ≤ 0.3 × before. Each is the median of 3 runs.
func BenchmarkCompact_Replay(b *testing.B) {
	n := compactSize()
	b.Run("tasks="+sizeName(n), func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			dir := filepath.Join(b.TempDir(), "tree")
			if err := buildFinishedTree(dir, n); err != nil {
				b.Fatal(err)
			}
			before := replayTimes(b, dir)
			if err := compactTree(dir); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			after := replayTimes(b, dir)
			b.ReportMetric(before.Seconds(), "before-s")
			b.ReportMetric(after.Seconds(), "after-s")
			b.ReportMetric(after.Seconds()/before.Seconds(), "ratio")
		}
	})
}

// replayTimes is the median of 3 replay --check runs on dir, each on a
// Tree of its own, as the CLI runs it; each must find nothing.
func replayTimes(b *testing.B, dir string) time.Duration {
	var ds []time.Duration
	for range 3 {
		d, err := timed(func() error {
			tree, err := fence.Open(dir, fence.Options{})
			if err != nil {
				return err
			}
			defer tree.Close()
			rep, err := tree.Replay(context.Background(), true)
			if err == nil && len(rep.Findings) > 0 {
				err = fmt.Errorf("replay --check found %d findings, e.g. %s", len(rep.Findings), rep.Findings[0].Describe())
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
	}
	return median(ds)
}

func compactTree(dir string) error {
	tree, err := fence.Open(dir, fence.Options{})
	if err != nil {
		return err
	}
	defer tree.Close()
	_, err = tree.Compact(context.Background(), fence.CompactRequest{Agent: "bench"})
	return err
}

func fileSize(b *testing.B, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}
