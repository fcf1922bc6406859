package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// listRuns is how many list pages one batch of BenchmarkList_Limit100 reads.
const listRuns = 300

// BenchmarkList_Limit100 is one page of 100 tasks (fence.List, as `fencectl
// list --limit 100` reads it) from the first id, with 1k, 100k and 1M tasks
// in the journal: a seek and a page of records, never every task, so it
// should not grow with the journal.
func BenchmarkList_Limit100(b *testing.B) {
	for _, size := range scaleSizes() {
		b.Run("tasks="+sizeName(size), func(b *testing.B) {
			st := getScaleTree(b, size)
			tree := openTree(b, st.dir)
			ctx := context.Background()
			n := listRuns * b.N
			lats := make([]time.Duration, 0, n)
			var total time.Duration
			b.ResetTimer()
			for range n {
				t0 := time.Now()
				p, err := tree.List(ctx, fence.ListFilter{Limit: 100})
				d := time.Since(t0)
				if err != nil || len(p.Tasks) != 100 {
					b.Fatalf("list --limit 100: %d tasks, %v", len(p.Tasks), err)
				}
				lats, total = append(lats, d), total+d
			}
			b.StopTimer()
			b.ReportMetric(float64(total.Nanoseconds())/float64(n), "ns/op")
			b.ReportMetric(ms(percentile(lats, 0.50)), "p50-ms")
			b.ReportMetric(ms(percentile(lats, 0.99)), "p99-ms")
			reportBuild(b, st)
		})
	}
}

// BenchmarkClaimNextLabel is one claim of the next ready task that carries
// a label (claim --label gpu) through the Go API, with 1k, 100k and 1M
// unlabelled ready tasks beside the labelled ones: the claim walks the
// label's own ready index, so it should not grow with the journal. The
// labelled tasks (300 per batch) are added untimed before the batch; the
// complete after each claim is not timed.
func BenchmarkClaimNextLabel(b *testing.B) {
	for _, size := range scaleSizes() {
		b.Run("tasks="+sizeName(size), func(b *testing.B) {
			st := getScaleTree(b, size)
			tree := openTree(b, st.dir)
			ctx := context.Background()
			n := scaleClaims * b.N
			addConcurrently(b, tree, n, func(i int) fence.AddRequest {
				st.topUps++
				return fence.AddRequest{ID: fmt.Sprintf("g%07d-%d", st.topUps, i), Labels: []string{"gpu"}}
			})
			lats := make([]time.Duration, 0, n)
			var total time.Duration
			floorBefore := quickFloor(b)
			b.ResetTimer()
			for range n {
				t0 := time.Now()
				c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "label", Labels: []string{"gpu"}})
				d := time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				lats, total = append(lats, d), total+d
				b.StopTimer()
				if _, err := tree.Complete(ctx, fence.FencedRequest{ID: c.Task.ID, Token: c.Token}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			report(b, run{ops: n, elapsed: total, lats: lats, other: -1, floor: (floorBefore + quickFloor(b)) / 2})
			reportBuild(b, st)
		})
	}
}

// fanIn is how many tasks wait for one in BenchmarkDeps_FanIn.
const fanIn = 10000

// BenchmarkDeps_FanIn is the completion of one task that 10k others wait
// for (add --after root): the one commit that records a dep_done for each
// dependent, through the reverse index, and moves all 10k from waiting/ to
// available/. ms is that complete call; per-dependent-us the same per
// dependent. The tree is built untimed, its adds in parallel (group commit).
func BenchmarkDeps_FanIn(b *testing.B) {
	ctx := context.Background()
	var lats []time.Duration
	for range b.N {
		b.StopTimer()
		tree := openTree(b, newTree(b, 0))
		if _, err := tree.Add(ctx, fence.AddRequest{ID: "root"}); err != nil {
			b.Fatal(err)
		}
		addConcurrently(b, tree, fanIn, func(i int) fence.AddRequest {
			return fence.AddRequest{ID: fmt.Sprintf("d%05d", i), After: []string{"root"}}
		})
		c, err := tree.Claim(ctx, fence.ClaimRequest{ID: "root", Agent: "fan-in"})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		_, err = tree.Complete(ctx, fence.FencedRequest{ID: "root", Token: c.Token})
		lats = append(lats, time.Since(t0))
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if s, err := tree.Status(ctx); err != nil || s.Counts[record.Available] != fanIn || s.Counts[record.Waiting] != 0 {
			b.Fatalf("after the root's completion: %v, %v; want %d available, none waiting", s.Counts, err, fanIn)
		}
	}
	m := median(lats)
	b.ReportMetric(ms(m), "ms")
	b.ReportMetric(float64(m.Microseconds())/fanIn, "per-dependent-us")
}

// addConcurrently adds n tasks made by req through 16 goroutines sharing
// tree, so that group commit puts many adds in one transaction.
func addConcurrently(b *testing.B, tree *fence.Tree, n int, req func(i int) fence.AddRequest) {
	b.Helper()
	reqs := make([]fence.AddRequest, n)
	for i := range reqs {
		reqs[i] = req(i)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := tree.Add(context.Background(), reqs[i]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
