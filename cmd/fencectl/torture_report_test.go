package main

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The torture suite (issue: kill storms, linearizability, fuzzing, full
// disks, hostile trees) runs small in `make test` and full in
// `make torture`, which sets FENCE_TORTURE=full and FENCE_TORTURE_REPORT to
// a file that collects one JSON object per measured part; cmd/torturereport
// renders them into docs/RELIABILITY.md.

// tortureFull reports whether this is the full run (make torture).
func tortureFull() bool { return os.Getenv("FENCE_TORTURE") == "full" }

// tortureScale picks the size of a torture part: small in make test, full
// in make torture. FENCE_TORTURE_SCALE=N (a percentage) scales the full
// size for quick experiments.
func tortureScale(small, full int) int {
	if !tortureFull() {
		return small
	}
	if p, err := strconv.Atoi(os.Getenv("FENCE_TORTURE_SCALE")); err == nil && p > 0 {
		return max(small, full*p/100)
	}
	return full
}

var reportMu sync.Mutex

// tortureReport records the figures of one torture part. Metric values are
// numbers or short strings; "ok" (bool) says whether the part's checks
// passed. Without FENCE_TORTURE_REPORT it only logs them.
func tortureReport(t testing.TB, part string, metrics map[string]any) {
	t.Helper()
	metrics["part"] = part
	metrics["ok"] = !t.Failed()
	metrics["at"] = time.Now().UTC().Format(time.RFC3339)
	b, err := json.Marshal(metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("torture report: %s", b)
	path := os.Getenv("FENCE_TORTURE_REPORT")
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}
