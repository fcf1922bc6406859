package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkWait_AddToClaim measures how long a waiting `fencectl claim
// --wait` takes to return with a task after `fencectl add` puts one in
// available/: from the moment the add process is started, and from the
// moment it returned. The waiting claim is woken by an inotify watch on
// available/ and inbox/, not by its poll (every second on a bbolt tree;
// it was every 100 ms before), so this is the add's own time plus a
// claim's.
func BenchmarkWait_AddToClaim(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "tree")
	fencectl(b, dir, "init")
	tree := openTree(b, dir)
	changes, err := tree.Watch()
	if err != nil {
		b.Fatal(err)
	}
	defer changes.Close()
	samples := max(b.N, 40)
	var fromStart, fromReturn []time.Duration
	for i := 0; i < samples; i++ {
		// Drain, then start the claim and wait for its first try (it
		// writes the journal): from then on it waits, watching.
		select {
		case <-changes.C():
		default:
		}
		claim := exec.Command(fencectlBin, "claim", "--wait", "60s", "--agent", "waiter")
		claim.Env = append(os.Environ(), "FENCE_DIR="+dir)
		if err := claim.Start(); err != nil {
			b.Fatal(err)
		}
		select {
		case <-changes.C():
		case <-time.After(30 * time.Second):
			b.Fatal("the waiting claim never tried")
		}
		exited := make(chan time.Time, 1)
		go func() { claim.Wait(); exited <- time.Now() }()
		start := time.Now()
		fencectl(b, dir, "add", "--id", fmt.Sprintf("t%d", i))
		returned := time.Now()
		var end time.Time
		select {
		case end = <-exited:
		case <-time.After(30 * time.Second):
			b.Fatal("the waiting claim did not return")
		}
		if claim.ProcessState.ExitCode() != 0 {
			b.Fatalf("claim exited %d", claim.ProcessState.ExitCode())
		}
		fromStart = append(fromStart, end.Sub(start))
		fromReturn = append(fromReturn, end.Sub(returned))
	}
	b.ReportMetric(ms(median(fromStart)), "p50-ms")
	b.ReportMetric(ms(percentile(fromStart, 0.99)), "p99-ms")
	b.ReportMetric(ms(median(fromReturn)), "p50-ms-from-add-return")
	b.ReportMetric(ms(percentile(fromReturn, 0.99)), "p99-ms-from-add-return")
}
