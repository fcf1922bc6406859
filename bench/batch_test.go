package bench

import (
	"context"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// batchRounds is how many rounds of 100 claims one batch of
// BenchmarkLibrary_ClaimBatch does, each way.
const batchRounds = 20

// BenchmarkLibrary_ClaimBatch is 100 tasks claimed through the Go API in
// one batch claim (one transaction, a token each) against the same 100
// claimed one Claim call at a time, alternating round by round on trees
// of the same size so that drift hits both alike. ms-per-100 is the
// batch's median per round, single-ms-per-100 the one-by-one's;
// speedup is single / batch.
func BenchmarkLibrary_ClaimBatch(b *testing.B) {
	const per = 100
	n := batchRounds * per * b.N
	batchTree := openTree(b, newTree(b, n))
	singleTree := openTree(b, newTree(b, n))
	ctx := context.Background()
	var batch, single []time.Duration
	b.ResetTimer()
	for range batchRounds * b.N {
		t0 := time.Now()
		res, err := batchTree.ClaimBatch(ctx, fence.BatchClaimRequest{Count: per, Agent: "batch"})
		batch = append(batch, time.Since(t0))
		if err != nil || len(res.Assigned) != per {
			b.Fatalf("batch claim: %d assigned, %v", len(res.Assigned), err)
		}
		t0 = time.Now()
		for range per {
			if _, err := singleTree.Claim(ctx, fence.ClaimRequest{Agent: "single"}); err != nil {
				b.Fatal(err)
			}
		}
		single = append(single, time.Since(t0))
	}
	b.StopTimer()
	mb, ms1 := median(batch), median(single)
	b.ReportMetric(ms(mb), "ms-per-100")
	b.ReportMetric(ms(ms1), "single-ms-per-100")
	b.ReportMetric(float64(ms1)/float64(mb), "speedup")
}
