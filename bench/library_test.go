package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// libraryCycles is how many claim + complete cycles one batch of a library
// benchmark does, per goroutine count.
var libraryCycles = map[int]int{1: 2000, 16: 6000}

// BenchmarkLibrary_ClaimComplete is one fully durable claim and complete
// through the Go API in one process: a single goroutine, and 16 goroutines
// sharing one *fence.Tree (what group commit speeds up). p50/p99 are of
// the Claim call alone.
func BenchmarkLibrary_ClaimComplete(b *testing.B) {
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			n := libraryCycles[g] * b.N
			tree := openTree(b, newTree(b, n))
			ctx := context.Background()
			b.ResetTimer()
			r := runWorkers(b, g, n, func(w, _ int) (time.Duration, error) {
				t0 := time.Now()
				c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: fmt.Sprintf("lib-%d", w)})
				lat := time.Since(t0)
				if err != nil {
					return lat, err
				}
				_, err = tree.Complete(ctx, fence.FencedRequest{ID: c.Task.ID, Token: c.Token})
				return lat, err
			})
			b.StopTimer()
			report(b, r)
		})
	}
}
