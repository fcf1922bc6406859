package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencectl/fencectl/fence"
)

// newTree makes a tree with n available tasks.
func newTree(b *testing.B, n int) *fence.Tree {
	b.Helper()
	dir := b.TempDir()
	if _, err := fence.Init(dir, fence.Defaults{TTL: fence.DefaultTTL, MaxAttempts: 3}); err != nil {
		b.Fatal(err)
	}
	tree, err := fence.Open(dir, fence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tree.Close() })
	for i := 0; i < n; i++ {
		if _, err := tree.Add(context.Background(), fence.AddRequest{ID: fmt.Sprintf("t%07d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	return tree
}

// BenchmarkLibrary_ClaimComplete is one fully durable claim and complete
// through the Go API, single goroutine.
func BenchmarkLibrary_ClaimComplete(b *testing.B) {
	tree := newTree(b, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tree.Complete(ctx, fence.FencedRequest{ID: c.Task.ID, Token: c.Token}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
}
