package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
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

func TestProtoReplay(t *testing.T) {
	n := 100000
	if s := os.Getenv("PROTO_N"); s != "" {
		fmt.Sscan(s, &n)
	}
	dir := t.TempDir()
	t0 := time.Now()
	if err := buildFinishedTree(dir, n); err != nil {
		t.Fatal(err)
	}
	t.Logf("build %v", time.Since(t0))
	tree, err := fence.Open(dir, fence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	for range 2 {
		t0 = time.Now()
		rep, err := tree.Replay(context.Background(), true)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("replay --check %v: %d events %d tasks %d findings", time.Since(t0), rep.Events, rep.Tasks, len(rep.Findings))
	}
	st, _ := os.Stat(dir + "/.fence/journal.db")
	t.Logf("journal %d bytes, %d per task", st.Size(), st.Size()/int64(n))
}
