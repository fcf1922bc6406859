package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// scaleSizes are the journal sizes of the scale benchmarks. BENCH_MAX_TASKS
// drops the larger ones (e.g. BENCH_MAX_TASKS=100000 for a quick run).
func scaleSizes() []int {
	max := 1000000
	if s := os.Getenv("BENCH_MAX_TASKS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			max = n
		}
	}
	var out []int
	for _, n := range []int{1000, 100000, 1000000} {
		if n <= max {
			out = append(out, n)
		}
	}
	return out
}

// scaleTree is a tree of one size, built once per run and shared by the
// scale benchmarks. Each benchmark first tops it up (ensureReady) so that it
// starts with size + its own claims ready and ends with size ready.
type scaleTree struct {
	once   sync.Once
	dir    string
	build  time.Duration
	err    error
	topUps int // tasks added since the build, for unique names
}

var (
	scaleMu    sync.Mutex
	scaleTrees = map[int]*scaleTree{}
)

// getScaleTree returns the tree for size, building it the first time
// (untimed; reportBuild reports how long that took).
func getScaleTree(b *testing.B, size int) *scaleTree {
	b.Helper()
	scaleMu.Lock()
	st := scaleTrees[size]
	if st == nil {
		st = &scaleTree{}
		scaleTrees[size] = st
	}
	scaleMu.Unlock()
	st.once.Do(func() {
		st.dir = filepath.Join(workDir, "scale-"+sizeName(size))
		t0 := time.Now()
		st.err = buildTree(st.dir, size)
		st.build = time.Since(t0)
	})
	if st.err != nil {
		b.Fatalf("build the %s tree: %v", sizeName(size), st.err)
	}
	return st
}

// ensureReady brings the tree to at least want ready tasks: the missing
// ones are dropped into inbox/ and adopted by writers (reaps that find
// nothing to reap, 256 files each), then one claim is made and released
// so that the last commit is a small one again.
func (st *scaleTree) ensureReady(b *testing.B, want int) {
	b.Helper()
	tree, err := fence.Open(st.dir, fence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tree.Close()
	ctx := context.Background()
	s, err := tree.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	missing := want - s.Counts[record.Available]
	if missing <= 0 {
		return
	}
	inbox := filepath.Join(st.dir, "inbox")
	for i := 0; i < missing; i++ {
		st.topUps++
		if err := os.WriteFile(filepath.Join(inbox, fmt.Sprintf("u%07d", st.topUps)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for left := missing; left > 0; { // a writer adopts 256 files a turn
		if _, err := tree.Reap(ctx, false); err != nil {
			b.Fatal(err)
		}
		entries, err := os.ReadDir(inbox)
		if err != nil || len(entries) >= left {
			b.Fatalf("a writer adopted nothing of the %d files left in inbox/ (%v)", left, err)
		}
		left = len(entries)
	}
	c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "warm-up"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tree.Release(ctx, fence.FencedRequest{ID: c.Task.ID, Token: c.Token}); err != nil {
		b.Fatal(err)
	}
	if s, err = tree.Status(ctx); err != nil {
		b.Fatal(err)
	} else if got := s.Counts[record.Available]; got < want {
		b.Fatalf("topped the tree up to %d ready tasks, want %d", got, want)
	}
}

// reportBuild reports how long building st took (after the timed part:
// b.ResetTimer drops metrics reported before it).
func reportBuild(b *testing.B, st *scaleTree) { b.ReportMetric(st.build.Seconds(), "build-s") }

// scaleClaims is how many claims one batch of a scale benchmark times.
const scaleClaims = 300

// BenchmarkClaimNext is the latency of one claim of the next ready task
// through the Go API with 1k, 100k and 1M ready tasks in the journal (from
// size + 300 down to size over the batch; the complete that follows each
// claim is not timed). A claim reads the ready index, so it should not grow
// with the journal.
func BenchmarkClaimNext(b *testing.B) {
	for _, size := range scaleSizes() {
		b.Run("tasks="+sizeName(size), func(b *testing.B) {
			st := getScaleTree(b, size)
			n := scaleClaims * b.N
			st.ensureReady(b, size+n)
			tree := openTree(b, st.dir)
			ctx := context.Background()
			lats := make([]time.Duration, 0, n)
			var total time.Duration
			floorBefore := quickFloor(b)
			mark := markCPU()
			b.ResetTimer()
			for i := 0; i < n; i++ {
				t0 := time.Now()
				c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: "scale"})
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
			other := otherCPU(mark, markCPU())
			report(b, run{ops: n, elapsed: total, lats: lats, other: other, floor: (floorBefore + quickFloor(b)) / 2})
			reportBuild(b, st)
		})
	}
}

// BenchmarkCLI_ClaimNext is the same through the release binary: one
// `fencectl claim` process per claim (the complete is not timed).
func BenchmarkCLI_ClaimNext(b *testing.B) {
	for _, size := range scaleSizes() {
		b.Run("tasks="+sizeName(size), func(b *testing.B) {
			st := getScaleTree(b, size)
			n := scaleClaims * b.N
			st.ensureReady(b, size+n)
			cli := newAgentCLI(b, fencectlBin, st.dir)
			lats := make([]time.Duration, 0, n)
			var total time.Duration
			floorBefore := quickFloor(b)
			mark := markCPU()
			b.ResetTimer()
			for i := 0; i < n; i++ {
				id, token, d, err := cli.claim("scale")
				if err != nil {
					b.Fatal(err)
				}
				lats, total = append(lats, d), total+d
				b.StopTimer()
				if err := cli.complete(id, token); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			other := otherCPU(mark, markCPU())
			report(b, run{ops: n, elapsed: total, lats: lats, other: other, floor: (floorBefore + quickFloor(b)) / 2})
			reportBuild(b, st)
		})
	}
}

// statusRuns is how many `fencectl status` runs one batch times.
const statusRuns = 300

// BenchmarkCLI_Status is one `fencectl status` process (counts per state
// and the live leases) with 1k, 100k and 1M tasks in the journal.
func BenchmarkCLI_Status(b *testing.B) {
	for _, size := range scaleSizes() {
		b.Run("tasks="+sizeName(size), func(b *testing.B) {
			st := getScaleTree(b, size)
			cli := newAgentCLI(b, fencectlBin, st.dir)
			n := statusRuns * b.N
			b.ResetTimer()
			r := runWorkers(b, 1, n, func(int, int) (time.Duration, error) {
				return timed(func() error {
					if _, err := cli.output("status"); err != nil {
						return fmt.Errorf("fencectl status: %w", helperErr(err))
					}
					return nil
				})
			})
			b.StopTimer()
			reportRuns(b, r)
			reportFloor(b, r, median(r.lats))
			cli.reportBusy(b)
			reportBuild(b, st)
		})
	}
}
