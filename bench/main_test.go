package bench

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// fencectlBin is the release binary (make build's tags), built once.
var fencectlBin string

// TestMain builds the binary the CLI benchmarks run, and doubles as the
// helper commands they start (see helperMain).
func TestMain(m *testing.M) {
	if h := os.Getenv("BENCH_HELPER"); h != "" {
		helperMain(h)
		return
	}
	dir, err := os.MkdirTemp("", "fencectl-bench")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fencectlBin = filepath.Join(dir, "fencectl")
	build := exec.Command("go", "build", "-tags", "urfave_cli_no_docs", "-trimpath", "-o", fencectlBin, "../cmd/fencectl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build fencectl:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helperMain runs a small command for a benchmark in its own process.
//
//	sigterm-recorder: write "ready" to $BENCH_READY, then on SIGTERM write
//	the time (Unix ns) to $BENCH_TERM and exit 143.
func helperMain(name string) {
	switch name {
	case "sigterm-recorder":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		os.WriteFile(os.Getenv("BENCH_READY"), []byte("ready"), 0o644)
		<-c
		os.WriteFile(os.Getenv("BENCH_TERM"), []byte(fmt.Sprint(time.Now().UnixNano())), 0o644)
		os.Exit(143)
	}
	fmt.Fprintln(os.Stderr, "unknown helper", name)
	os.Exit(2)
}

// fencectl runs the release binary on dir and fails b on error.
func fencectl(b testing.TB, dir string, args ...string) []byte {
	b.Helper()
	cmd := exec.Command(fencectlBin, args...)
	cmd.Env = append(os.Environ(), "FENCE_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("fencectl %v: %v\n%s", args, err, out)
	}
	return out
}

// waitFile waits for path to appear.
func waitFile(b testing.TB, path string) []byte {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			return data
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatalf("%s never appeared", path)
	return nil
}
