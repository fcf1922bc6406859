package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Sizes of BenchmarkRun_Loop's batches.
const (
	loopShellCycles = 300  // the reference: claim + complete processes
	loopTasks1      = 600  // run --loop, one runner
	loopTasks8      = 3000 // run --loop, eight runners
)

// BenchmarkRun_Loop is `fencectl run --loop -- true` working through a
// tree: one process, no start-up per task, the command a no-op.
//
// runners=1 first runs its reference on a tree of the same kind, right
// before: one agent looping over `fencectl claim` + `fencectl complete`
// processes, as a shell loop does (shell-cycles/s); x-shell is run
// --loop's tasks/s over that. runners=8 is eight run --loop processes on
// one tree; jobs=8 is one run --loop --jobs 8 process, its eight loops
// sharing commits. claims/s is tasks run and completed per second; cpu-ms is
// the CPU of the run processes (their commands included) per task;
// floor-ms is the fdatasync floor measured around the run: a task pays
// two fdatasyncs (its moves are not fsynced: see fence/bootreconcile.go).
func BenchmarkRun_Loop(b *testing.B) {
	b.Run("runners=1", func(b *testing.B) {
		shellDir := newTree(b, loopShellCycles*b.N)
		cli := newAgentCLI(b, fencectlBin, shellDir)
		shell := runWorkers(b, 1, loopShellCycles*b.N, func(int, int) (time.Duration, error) {
			return cli.cycle("shell-agent")
		})
		dir := newTree(b, loopTasks1*b.N)
		b.ResetTimer()
		r, cpu := runLoops(b, dir, 1, loopTasks1*b.N)
		b.StopTimer()
		report(b, r)
		shellRate := float64(shell.ops) / shell.elapsed.Seconds()
		b.ReportMetric(shellRate, "shell-cycles/s")
		b.ReportMetric(float64(r.ops)/r.elapsed.Seconds()/shellRate, "x-shell")
		b.ReportMetric(ms(cpu)/float64(r.ops), "cpu-ms")
		b.ReportMetric(ms(r.floor), "floor-ms")
		cli.reportBusy(b)
	})
	b.Run("runners=8", func(b *testing.B) {
		dir := newTree(b, loopTasks8*b.N)
		b.ResetTimer()
		r, cpu := runLoops(b, dir, 8, loopTasks8*b.N)
		b.StopTimer()
		report(b, r)
		b.ReportMetric(ms(cpu)/float64(r.ops), "cpu-ms")
		b.ReportMetric(ms(r.floor), "floor-ms")
	})
	b.Run("jobs=8", func(b *testing.B) {
		dir := newTree(b, loopTasks8*b.N)
		b.ResetTimer()
		r, cpu := runLoops(b, dir, 1, loopTasks8*b.N, "--jobs", "8")
		b.StopTimer()
		report(b, r)
		b.ReportMetric(ms(cpu)/float64(r.ops), "cpu-ms")
		b.ReportMetric(ms(r.floor), "floor-ms")
	})
}

// runLoops runs n `fencectl run --loop [flags] -- true` processes on dir
// until they have all ended (nothing left to claim), checks that every
// one of the tasks is done, and returns the run and the CPU the processes
// used.
func runLoops(b *testing.B, dir string, n, tasks int, flags ...string) (run, time.Duration) {
	b.Helper()
	floorBefore := quickFloor(b)
	mark := markCPU()
	start := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		cpu   time.Duration
		first error
	)
	for i := range n {
		args := append([]string{"run", "--loop", "--agent", fmt.Sprintf("runner-%d", i)}, flags...)
		cmd := exec.Command(fencectlBin, append(args, "--", "true")...)
		cmd.Env = append(os.Environ(), "FENCE_DIR="+dir)
		// A line per task goes to stderr: into a memory file, not a pipe
		// this process would wake up for (see outputOf).
		out, err := memFile("run")
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer out.Close()
			err := cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				said, _ := readAll(out)
				first = fmt.Errorf("run --loop: %w; it said: %s", err, lastLines(said, 5))
			}
			if ps := cmd.ProcessState; ps != nil {
				cpu += ps.UserTime() + ps.SystemTime()
			}
		}()
	}
	wg.Wait()
	end := markCPU()
	r := run{ops: tasks, elapsed: time.Since(start), other: otherCPU(mark, end), cpu: ownCPU(mark, end)}
	r.floor = (floorBefore + quickFloor(b)) / 2
	if first != nil {
		b.Fatal(first)
	}
	// newTree's warm-up task is done already.
	if done, err := os.ReadDir(dir + "/done"); err != nil || len(done) != tasks+1 {
		b.Fatalf("after run --loop: %d tasks in done/ (%v), want %d", len(done)-1, err, tasks)
	}
	return r, cpu
}

// lastLines is the last n lines of out.
func lastLines(out []byte, n int) []byte {
	lines := bytes.SplitAfter(bytes.TrimRight(out, "\n"), []byte("\n"))
	return bytes.Join(lines[max(0, len(lines)-n):], nil)
}
