package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// The etcd journal beside bbolt, in the same run (issue 11, "Many
// hosts"). Everything that links etcd runs in other processes: the etcd
// member and the Go API rows in bench/etcdbench, the CLI rows in
// fencectl-etcd; see etcdbench's doc for why the test binary stays free
// of it.

// startEtcd starts one etcd member (etcdbench serve) for b and returns
// its endpoints; it stops when b ends. Its CPU counts as the benchmark's.
func startEtcd(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(etcdBenchBin, "serve", b.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	servers.add(cmd.Process.Pid)
	b.Cleanup(func() {
		stdin.Close() // the member stops when its stdin closes
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		servers.remove(cmd.Process.Pid)
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	endpoints, ok := strings.CutPrefix(strings.TrimSpace(line), "endpoints ")
	if err != nil || !ok {
		b.Fatalf("etcdbench serve printed %q: %v", line, err)
	}
	return endpoints
}

// newEtcdTree makes a tree whose journal is in etcd at endpoints, with n
// available tasks.
func newEtcdTree(b *testing.B, endpoints string, n int) string {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "tree")
	out, err := exec.Command(etcdBenchBin, "tree", "-endpoints", endpoints, "-dir", dir, "-tasks", fmt.Sprint(n)).CombinedOutput()
	if err != nil {
		b.Fatalf("etcdbench tree: %v\n%s", err, out)
	}
	return dir
}

// libraryEtcdCycles is how many claim + complete cycles one batch of an
// etcd library row does.
const libraryEtcdCycles = 2000

// BenchmarkBackend_Library is claim + complete through the Go API, 16
// goroutines at once, on bbolt and on one etcd member in the same run:
// one shared *fence.Tree (group commit), and on etcd also 16 Trees, so
// 16 etcd clients whose transactions race (retries/claim: the
// transactions a conflict made run again, per claim; timeouts: claims
// that lost every race for the store's 10 s and were run again). The etcd rows run
// in etcdbench (the member in a process of its own, over loopback).
// rebases/claim counts the runs made again at once on a moved head (a
// commit that lost on P/m/head, which every write rewrites; see
// journal/etcd/rebase.go).
func BenchmarkBackend_Library(b *testing.B) {
	b.Run("backend=bbolt/goroutines=16", func(b *testing.B) {
		n := libraryEtcdCycles * b.N
		tree := openTree(b, newTree(b, n))
		ctx := context.Background()
		b.ResetTimer()
		r := runWorkers(b, 16, n, func(w, _ int) (time.Duration, error) {
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
	for _, trees := range []int{1, 16} {
		name := "backend=etcd/goroutines=16"
		if trees > 1 {
			name = "backend=etcd/clients=16"
		}
		b.Run(name, func(b *testing.B) {
			n := libraryEtcdCycles * b.N
			if trees > 1 {
				// Racing clients are slow (see timeouts): a smaller
				// batch keeps make bench bounded; retries/claim is a mean.
				n /= 4
			}
			endpoints := startEtcd(b)
			// Made first, so that the CPU measured around the library
			// process is the cycles' (and the member's) alone.
			dir := newEtcdTree(b, endpoints, n)
			b.ResetTimer()
			var res struct {
				Ops       int     `json:"ops"`
				ElapsedNS int64   `json:"elapsed_ns"`
				LatsNS    []int64 `json:"lats_ns"`
				Retries   int64   `json:"retries"`
				Timeouts  int64   `json:"timeouts"`
				Rebases   int64   `json:"rebases"`
			}
			floorBefore := quickFloor(b)
			mark := markCPU()
			cmd := exec.Command(etcdBenchBin, "library", "-endpoints", endpoints, "-dir", dir, "-made",
				"-tasks", fmt.Sprint(n), "-goroutines", "16", "-trees", fmt.Sprint(trees))
			out, err := cmd.Output()
			end := markCPU()
			other := otherCPU(mark, end)
			if err != nil {
				b.Fatalf("etcdbench library: %v", helperErr(err))
			}
			if err := json.Unmarshal(out, &res); err != nil || res.Ops != n {
				b.Fatalf("etcdbench library printed %.200q: %v", out, err)
			}
			b.StopTimer()
			// The CPU is that of the whole library process (its start and
			// connection included) over the cycles' elapsed time: a little
			// high, never low.
			r := run{ops: res.Ops, elapsed: time.Duration(res.ElapsedNS), other: other, cpu: ownCPU(mark, end)}
			for _, l := range res.LatsNS {
				r.lats = append(r.lats, time.Duration(l))
			}
			r.floor = (floorBefore + quickFloor(b)) / 2
			report(b, r)
			b.ReportMetric(float64(res.Retries)/float64(res.Ops), "retries/claim")
			if res.Timeouts > 0 {
				b.ReportMetric(float64(res.Timeouts), "timeouts")
			}
			b.ReportMetric(float64(res.Rebases)/float64(res.Ops), "rebases/claim")
		})
	}
}

// backendCLICycles is how many claim + complete cycles one batch of a
// BenchmarkBackend_CLI row does.
const backendCLICycles = 600

// BenchmarkBackend_CLI is claim + complete through the CLI at 8
// processes on bbolt (fencectl) and on etcd (one member over loopback),
// in the same run: with fencectl-etcd, the binary that links etcd, and
// with fencectl, which finds .fence/journal.json and execs fencectl-etcd
// (the hand-off every etcd command pays when agents call plain fencectl).
func BenchmarkBackend_CLI(b *testing.B) {
	for _, row := range []struct {
		name string
		bin  *string
		etcd bool
	}{
		{"backend=bbolt/procs=8", &fencectlBin, false},
		{"backend=etcd/bin=fencectl-etcd/procs=8", &fencectlEtcdBin, true},
		{"backend=etcd/bin=fencectl/procs=8", &fencectlBin, true},
	} {
		b.Run(row.name, func(b *testing.B) {
			n := backendCLICycles * b.N
			var dir string
			if row.etcd {
				dir = newEtcdTree(b, startEtcd(b), n)
				servers.addDaemon(b, dir)
			} else {
				dir = newTree(b, n)
			}
			cli := newAgentCLI(b, *row.bin, dir)
			b.ResetTimer()
			r := runWorkers(b, 8, n, func(w, _ int) (time.Duration, error) {
				return cli.cycle(fmt.Sprintf("agent-%d", w))
			})
			b.StopTimer()
			report(b, r)
			cli.reportBusy(b)
		})
	}
}

// startRuns is how many times BenchmarkBackend_Start runs each binary.
const startRuns = 800

// BenchmarkBackend_Start is the start-up cost that linking etcd would
// put on bbolt trees: `fencectl status` on a bbolt tree with the plain
// release binary and with fencectl-etcd (the same, etcd linked), one
// process at a time, the two alternating so that drift hits both alike.
// p50-ms and cpu-ms are the plain binary's (median wall time of a run,
// and median user + system CPU); etcd-bin-p50-ms, etcd-bin-cpu-ms are
// fencectl-etcd's, and etcd-bin-extra-ms the difference of the wall
// medians. What plain fencectl pays for etcd at all is the hand-off check
// (BenchmarkBackend_HandOffCheck).
func BenchmarkBackend_Start(b *testing.B) {
	dir := newTree(b, 10)
	bins := []string{fencectlFullBin, fencectlEtcdBin}
	walls := make([][]time.Duration, len(bins))
	cpus := make([][]time.Duration, len(bins))
	mark := markCPU()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < startRuns*b.N; i++ {
		for j, bin := range bins {
			cmd := exec.Command(bin, "status")
			cmd.Env = append(os.Environ(), "FENCE_DIR="+dir)
			t0 := time.Now()
			out, err := outputOf(cmd)
			d := time.Since(t0)
			if err != nil {
				b.Fatalf("%s status: %v\n%s", bin, helperErr(err), out)
			}
			walls[j] = append(walls[j], d)
			cpus[j] = append(cpus[j], cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	runs := len(walls[0])
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(2*runs), "ns/op")
	b.ReportMetric(float64(runs)/elapsed.Seconds()*2, "runs/s")
	b.ReportMetric(ms(median(walls[0])), "p50-ms")
	b.ReportMetric(ms(percentile(walls[0], 0.99)), "p99-ms")
	b.ReportMetric(ms(median(cpus[0])), "cpu-ms")
	b.ReportMetric(ms(median(walls[1])), "etcd-bin-p50-ms")
	b.ReportMetric(ms(median(cpus[1])), "etcd-bin-cpu-ms")
	b.ReportMetric(ms(median(walls[1])-median(walls[0])), "etcd-bin-extra-ms")
	reportOther(b, run{other: otherCPU(mark, markCPU())})
}

// BenchmarkBackend_HandOffCheck is what plain fencectl does for etcd on
// every command of a bbolt tree: before the command runs, checkCommand
// looks for .fence/journal.json (fence.TreeJournal) to know whether to
// hand the tree to fencectl-etcd; on a bbolt tree it is not there. This
// is the whole difference between fencectl and a build without any etcd
// code on such a tree (the driver registry is a map lookup). p50-ms is
// the median of one check, in the process, with the file missing, for
// the tree "." (FENCE_DIR unset: the dearer case, filepath.Abs asks for
// the working directory).
func BenchmarkBackend_HandOffCheck(b *testing.B) {
	root := newTree(b, 1)
	wd, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Chdir(root); err != nil {
		b.Fatal(err)
	}
	defer os.Chdir(wd)
	dir := "."
	const checks = 20000
	lats := make([]time.Duration, 0, checks*b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < checks*b.N; i++ {
		t0 := time.Now()
		_, found, err := fence.TreeJournal(dir)
		lats = append(lats, time.Since(t0))
		if err != nil || found {
			b.Fatalf("a bbolt tree's hand-off check: found %v, %v", found, err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(len(lats)), "ns/op")
	b.ReportMetric(ms(median(lats)), "p50-ms")
	b.ReportMetric(ms(percentile(lats, 0.99)), "p99-ms")
}
