package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkFloor_Fdatasync is the disk's own limit: one 4 KiB write of an
// allocated block + fdatasync, on the file system of the trees. Every
// x-floor figure is a multiple of this (median of 2000, measured once).
func BenchmarkFloor_Fdatasync(b *testing.B) {
	d := floorFdatasync(b)
	b.ReportMetric(float64(d.Nanoseconds()), "ns/op")
	b.ReportMetric(float64(time.Second)/float64(d), "syncs/s")
	b.ReportMetric(ms(d), "p50-ms")
	b.ReportMetric(1, "x-floor")
	reportOther(b, run{other: floorOnce.other})
}

// BenchmarkFloor_RenameDirSync is the mirror's move with nothing else: a
// rename between two directories, then fsync of both (median of 1000).
func BenchmarkFloor_RenameDirSync(b *testing.B) {
	d := floorRename(b)
	b.ReportMetric(float64(d.Nanoseconds()), "ns/op")
	b.ReportMetric(float64(time.Second)/float64(d), "moves/s")
	b.ReportMetric(ms(d), "p50-ms")
	b.ReportMetric(float64(d)/float64(floorFdatasync(b)), "x-floor")
	reportOther(b, run{other: floorOnce.other})
}

// ceilingRuns is how many hello-world processes one batch starts.
const ceilingRuns = 2000

// BenchmarkCeiling_HelloWorld is the process-start ceiling: a Go
// hello-world binary started procs ways at once, as fast as it goes. A CLI
// claim is one process start, so no CLI can claim faster than this.
func BenchmarkCeiling_HelloWorld(b *testing.B) {
	for _, procs := range []int{1, 8} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			total := ceilingRuns * b.N
			if procs == 1 {
				total /= 4
			}
			r := runWorkers(b, procs, total, func(int, int) (time.Duration, error) {
				return timed(func() error { return exec.Command(helloBin).Run() })
			})
			reportRuns(b, r)
		})
	}
}

// reportRuns reports a process-start run: runs/s instead of claims/s.
func reportRuns(b *testing.B, r run) {
	b.ReportMetric(float64(r.elapsed.Nanoseconds())/float64(r.ops), "ns/op")
	b.ReportMetric(float64(r.ops)/r.elapsed.Seconds(), "runs/s")
	b.ReportMetric(ms(percentile(r.lats, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(r.lats, 0.99)), "p99-ms")
	reportOther(b, r)
	reportCPU(b, r)
}

// BenchmarkCeiling_DurableClaim is the ceiling for a durable
// one-process-per-claim CLI: bench/testdata/bareclaim takes a lock, writes
// and syncs one journal page and one commit record, renames the task file
// and fsyncs both directories, and does nothing else; run 8 ways like
// BenchmarkCLI_Claim, with hello-world measured around it (x-hello).
func BenchmarkCeiling_DurableClaim(b *testing.B) {
	b.Run("procs=8", func(b *testing.B) {
		n := cliClaims * b.N
		dir := b.TempDir()
		for _, d := range []string{"available", "claimed"} {
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := createEmpty(filepath.Join(dir, "available"), n); err != nil {
			b.Fatal(err)
		}
		j, err := os.Create(filepath.Join(dir, "journal"))
		if err == nil {
			err = j.Truncate(1001 * 4096)
		}
		if err == nil {
			err = j.Sync()
		}
		j.Close()
		if err != nil {
			b.Fatal(err)
		}
		againstHello(b, func() run {
			return runWorkers(b, 8, n, func(int, int) (time.Duration, error) {
				var out []byte
				lat, err := timed(func() (err error) {
					out, err = outputOf(exec.Command(bareClaimBin, dir))
					return err
				})
				if err == nil && !strings.HasPrefix(string(out), "FENCE_TASK=t") {
					err = fmt.Errorf("bareclaim printed %q", out)
				}
				return lat, helperErr(err)
			})
		})
	})
}
