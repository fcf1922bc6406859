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
	samples := max(b.N, 40)
	var fromStart, fromReturn []time.Duration
	for i := 0; i < samples; i++ {
		// Start the claim and wait until it watches the tree (an inotify
		// descriptor of its own): its first try found nothing, and from
		// then on it waits. (A try that finds nothing writes nothing, so
		// the journal cannot tell.)
		claim := exec.Command(fencectlBin, "claim", "--wait", "60s", "--agent", "waiter")
		claim.Env = append(os.Environ(), "FENCE_DIR="+dir)
		if err := claim.Start(); err != nil {
			b.Fatal(err)
		}
		if !watching(claim.Process.Pid, 30*time.Second) {
			b.Fatal("the waiting claim never watched the tree")
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

// watching reports whether process pid holds an inotify descriptor
// within d.
func watching(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); link == "anon_inode:inotify" {
				return true
			}
		}
		time.Sleep(time.Millisecond)
	}
	return false
}
