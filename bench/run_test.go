package bench

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRun_RevokeToSignal measures how long `fencectl run` takes to
// send SIGTERM to its command after an operator revokes the lease: from the
// moment the revoke process is started, and from the moment it returned.
// The keeper watches the journal with inotify, so this is milliseconds, not
// a heartbeat interval.
func BenchmarkRun_RevokeToSignal(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "tree")
	fencectl(b, dir, "init")
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var fromStart, fromReturn []time.Duration
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("t%d", i)
		fencectl(b, dir, "add", "--id", id)
		marks := b.TempDir()
		run := exec.Command(fencectlBin, "run", id, "--ttl", "1m", "--grace", "5s", "--", self)
		run.Env = append(os.Environ(), "FENCE_DIR="+dir, "BENCH_HELPER=sigterm-recorder",
			"BENCH_READY="+marks+"/ready", "BENCH_TERM="+marks+"/term")
		if err := run.Start(); err != nil {
			b.Fatal(err)
		}
		waitFile(b, marks+"/ready")
		start := time.Now()
		fencectl(b, dir, "revoke", id)
		returned := time.Now()
		ns, err := strconv.ParseInt(string(waitFile(b, marks+"/term")), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		term := time.Unix(0, ns)
		fromStart = append(fromStart, term.Sub(start))
		fromReturn = append(fromReturn, term.Sub(returned))
		run.Wait()
	}
	b.ReportMetric(ms(median(fromStart)), "ms-from-revoke-start")
	b.ReportMetric(ms(median(fromReturn)), "ms-from-revoke-return")
}

// sigtermRecorder is the sigterm-recorder helper: write "ready" to
// $BENCH_READY, then on SIGTERM write the time (Unix ns) to $BENCH_TERM and
// exit 143.
func sigtermRecorder() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	os.WriteFile(os.Getenv("BENCH_READY"), []byte("ready"), 0o644)
	<-c
	os.WriteFile(os.Getenv("BENCH_TERM"), []byte(fmt.Sprint(time.Now().UnixNano())), 0o644)
	os.Exit(143)
}

// deathSamples is how many kills BenchmarkRun_KillToClaimable times per
// iteration (the issue asks for p50 and max over 50).
const deathSamples = 50

// BenchmarkRun_KillToClaimable measures instant death detection: from
// SIGKILL of `fencectl run` (lease TTL ten minutes) to another agent's
// `fencectl claim` of the same task returning success, claims tried one
// after another. Without death detection this is the TTL. The tree has no
// retry backoff: a death counts as an attempt, and on a tree with the
// default backoff (1s) the task would wait that long in waiting/ after its
// instant reap, so the row would measure the backoff, not the detection.
func BenchmarkRun_KillToClaimable(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "tree")
	fencectl(b, dir, "init", "--retry-backoff", "0s")
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	tries := 0
	for i := 0; i < b.N; i++ {
		for s := 0; s < deathSamples; s++ {
			id := fmt.Sprintf("t%d-%d", i, s)
			fencectl(b, dir, "add", "--id", id)
			marks := b.TempDir()
			run := exec.Command(fencectlBin, "run", id, "--ttl", "10m", "--", self)
			run.Env = append(os.Environ(), "FENCE_DIR="+dir, "BENCH_HELPER=sigterm-recorder",
				"BENCH_READY="+marks+"/ready", "BENCH_TERM="+marks+"/term")
			if err := run.Start(); err != nil {
				b.Fatal(err)
			}
			waitFile(b, marks+"/ready")
			run.Process.Kill()
			killed := time.Now()
			for {
				tries++
				claim := exec.Command(fencectlBin, "claim", id, "--agent", "taker")
				claim.Env = append(os.Environ(), "FENCE_DIR="+dir)
				if claim.Run() == nil {
					break
				}
				if time.Since(killed) > time.Minute {
					b.Fatalf("task %s not claimable a minute after its run was killed", id)
				}
			}
			took = append(took, time.Since(killed))
			run.Wait()
		}
	}
	b.ReportMetric(ms(median(took)), "ms-p50-kill-to-claimable")
	b.ReportMetric(ms(percentile(took, 1)), "ms-max-kill-to-claimable")
	b.ReportMetric(float64(tries)/float64(len(took)), "claims-tried")
	b.ReportMetric(600_000, "ms-ttl")
}
