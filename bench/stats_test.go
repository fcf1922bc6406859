package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Every claim benchmark reports the same metrics, so that benchstat and
// bench/report can put them side by side:
//
//	ns/op     wall time per cycle (claim + complete, or one op where there is
//	          no complete), i.e. 1/throughput, not a latency
//	claims/s  cycles per second over the whole run (all workers together)
//	p50-ms    median latency of one claim (one process run, or one call)
//	p99-ms    99th percentile of the same
//	x-floor   p50-ms as a multiple of one 4 KiB write + fdatasync on the
//	          same file system, measured right before and right after the
//	          batch (floor-ms): the disk's speed drifts over minutes on this
//	          machine, so the floor is taken next to what it divides
//	other-cpu-pct  CPU used during the run by processes other than the
//	          benchmark and the commands it started, in % of the machine:
//	          above a few %, something else was running and the figures are
//	          noisy
//	cpu-ms/op CPU the benchmark's own processes used per cycle (this
//	          one, the commands it started, the etcd member it serves from;
//	          user + system): the cost that bounds a row whose CPU is busy
//	cpu-busy-pct   that CPU over the run's wall time, in % of the machine:
//	          near 100, the row is bound by the CPU, not by waiting (for a
//	          sync, a lock, a round trip)
//
// Each benchmark does a fixed batch of work per b.N (sized so that one batch
// takes a second or a few); `make bench` runs -benchtime=1x, one batch.

// run is what a worker pool did.
type run struct {
	ops     int
	elapsed time.Duration
	lats    []time.Duration // one per claim
	other   float64         // other-cpu-pct; <0 if not measured
	floor   time.Duration   // fdatasync floor measured around the run; 0 if not
	cpu     time.Duration   // the benchmark's own CPU during the run (ownCPU); 0 if not measured
}

// runWorkers runs total operations on procs workers; each pulls the next
// index and returns the latency of its claim (the part that is reported
// as p50/p99). The first error stops everything and fails b.
func runWorkers(b *testing.B, procs, total int, op func(worker, i int) (time.Duration, error)) run {
	b.Helper()
	var (
		next   atomic.Int64
		failed atomic.Bool
		mu     sync.Mutex
		lats   = make([]time.Duration, 0, total)
		wg     sync.WaitGroup
		errMu  sync.Mutex
		first  error
	)
	floorBefore := quickFloor(b)
	mark := markCPU()
	start := time.Now()
	for w := 0; w < procs; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []time.Duration
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= total {
					break
				}
				d, err := op(w, i)
				if err != nil {
					errMu.Lock()
					if first == nil {
						first = fmt.Errorf("worker %d, op %d: %w", w, i, err)
					}
					errMu.Unlock()
					failed.Store(true)
					return
				}
				mine = append(mine, d)
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	end := markCPU()
	r := run{ops: total, elapsed: time.Since(start), lats: lats, other: otherCPU(mark, end), cpu: ownCPU(mark, end)}
	r.floor = (floorBefore + quickFloor(b)) / 2
	if first != nil {
		b.Fatal(first)
	}
	return r
}

// report prints the standard metrics of r.
func report(b *testing.B, r run) {
	b.Helper()
	if r.ops == 0 || r.elapsed <= 0 {
		return
	}
	b.ReportMetric(float64(r.elapsed.Nanoseconds())/float64(r.ops), "ns/op")
	b.ReportMetric(float64(r.ops)/r.elapsed.Seconds(), "claims/s")
	if len(r.lats) > 0 {
		p50 := percentile(r.lats, 0.50)
		b.ReportMetric(ms(p50), "p50-ms")
		b.ReportMetric(ms(percentile(r.lats, 0.99)), "p99-ms")
		reportFloor(b, r, p50)
	}
	reportOther(b, r)
	reportCPU(b, r)
}

// reportCPU reports the benchmark's own CPU per cycle and how busy it
// kept the machine, if it was measured.
func reportCPU(b *testing.B, r run) {
	if r.cpu <= 0 || r.ops == 0 || r.elapsed <= 0 {
		return
	}
	b.ReportMetric(ms(r.cpu)/float64(r.ops), "cpu-ms/op")
	b.ReportMetric(100*float64(r.cpu)/(float64(r.elapsed)*float64(runtime.NumCPU())), "cpu-busy-pct")
}

// reportFloor reports d as a multiple of the floor measured around r (or,
// if none was, the floor of the run), and that floor.
func reportFloor(b *testing.B, r run, d time.Duration) {
	floor := r.floor
	if floor <= 0 {
		floor = floorFdatasync(b)
	}
	b.ReportMetric(float64(d)/float64(floor), "x-floor")
	b.ReportMetric(ms(floor), "floor-ms")
}

func reportOther(b *testing.B, r run) {
	if r.other >= 0 {
		b.ReportMetric(r.other, "other-cpu-pct")
	}
}

// cpuMark is a reading of the machine's and this process's CPU time.
type cpuMark struct {
	wall time.Time
	busy time.Duration // all CPUs, every process (from /proc/stat)
	self time.Duration // this process and its waited-for children
	ok   bool
}

func markCPU() cpuMark {
	m := cpuMark{wall: time.Now()}
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return m
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return m
	}
	var busy uint64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return m
		}
		busy += n
	}
	// Kernel threads (jbd2, kworkers) mostly do this benchmark's own
	// fsyncs: count them as neither ours nor other.
	busy -= kthreadTicks()
	m.busy = time.Duration(busy) * time.Second / 100 // USER_HZ
	var self, kids unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &self) != nil || unix.Getrusage(unix.RUSAGE_CHILDREN, &kids) != nil {
		return m
	}
	for _, tv := range []unix.Timeval{self.Utime, self.Stime, kids.Utime, kids.Stime} {
		m.self += time.Duration(tv.Nano())
	}
	m.self += servers.ticks() * time.Second / 100
	m.ok = true
	return m
}

// servers are the long-running children the benchmarks start and serve
// from (the etcd member of the etcd rows): not waited for until their
// benchmark ends, so RUSAGE_CHILDREN does not count them yet. Their CPU
// is the benchmark's own, not other processes'.
var servers serverSet

type serverSet struct {
	mu   sync.Mutex
	pids map[int]bool
	// daemons are the trees whose fencectl daemon (started by the first
	// command on an etcd tree, and no child of ours) does the commands'
	// work: its CPU is theirs.
	daemons map[string]bool
}

// addDaemon counts the CPU of dir's daemons as the benchmark's from now
// on; when b ends they are stopped.
func (s *serverSet) addDaemon(b *testing.B, dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.daemons == nil {
		s.daemons = map[string]bool{}
	}
	s.daemons[dir] = true
	b.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.daemons, dir)
		for _, pid := range daemonPids(dir) {
			_ = unix.Kill(pid, unix.SIGTERM)
		}
	})
}

// daemonPids are the processes that run `fencectl daemon --dir dir`.
func daemonPids(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := "daemon\x00--dir\x00" + dir + "\x00"
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (s *serverSet) add(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pids == nil {
		s.pids = map[int]bool{}
	}
	s.pids[pid] = true
}

func (s *serverSet) remove(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pids, pid)
}

// ticks is the CPU time, in clock ticks, the servers used so far.
func (s *serverSet) ticks() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum uint64
	var pids []int
	for pid := range s.pids {
		pids = append(pids, pid)
	}
	for dir := range s.daemons {
		pids = append(pids, daemonPids(dir)...)
	}
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		sum += u + st
	}
	return time.Duration(sum)
}

// kthreadTicks is the CPU time, in clock ticks, of all kernel threads
// (kthreadd and its children) so far.
func kthreadTicks() uint64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var sum uint64
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 13 || (e.Name() != "2" && f[1] != "2") {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		sum += u + st
	}
	return sum
}

// ownCPU is the CPU that the benchmark's own processes used between a
// and b (this process, the commands it started and waited for, its
// servers); 0 if unknown.
func ownCPU(a, b cpuMark) time.Duration {
	if !a.ok || !b.ok {
		return 0
	}
	return max(0, b.self-a.self)
}

// otherCPU is the CPU that other processes used between a and b, in % of
// all CPUs; -1 if unknown, or if the span is too short for the 10 ms clock
// ticks /proc/stat counts in.
func otherCPU(a, b cpuMark) float64 {
	wall := b.wall.Sub(a.wall)
	if !a.ok || !b.ok || wall < 200*time.Millisecond {
		return -1
	}
	other := (b.busy - a.busy) - (b.self - a.self)
	pct := 100 * float64(other) / (float64(wall) * float64(runtime.NumCPU()))
	return max(0, pct)
}

// percentile is the nearest-rank p-quantile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(p*float64(len(s))+0.5) - 1
	k = max(0, min(k, len(s)-1))
	return s[k]
}

func median(ds []time.Duration) time.Duration { return percentile(ds, 0.5) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// timed runs f and returns how long it took.
func timed(f func() error) (time.Duration, error) {
	t0 := time.Now()
	err := f()
	return time.Since(t0), err
}

// floorSamples is how many syncs the floor is the median of.
const floorSamples = 2000

var floorOnce struct {
	sync.Once
	fdatasync, renameSync time.Duration
	other                 float64 // other-cpu-pct while measuring
	err                   error
}

// floorFdatasync is the median time of one 4 KiB write + fdatasync of an
// already allocated block, on the file system of the trees: the disk's own
// limit for one durable commit. Measured once per run.
func floorFdatasync(b testing.TB) time.Duration {
	measureFloors(b)
	return floorOnce.fdatasync
}

// floorRename is the median time of one rename between two directories
// followed by an fsync of both: the mirror's move, with nothing else.
func floorRename(b testing.TB) time.Duration {
	measureFloors(b)
	return floorOnce.renameSync
}

func measureFloors(b testing.TB) {
	floorOnce.Do(func() {
		mark := markCPU()
		dir, err := os.MkdirTemp(workDir, "floor")
		if err == nil {
			defer os.RemoveAll(dir)
			floorOnce.fdatasync, err = measureFdatasync(dir, floorSamples)
		}
		if err == nil {
			floorOnce.renameSync, err = measureRenameSync(dir)
		}
		floorOnce.err = err
		floorOnce.other = otherCPU(mark, markCPU())
	})
	if floorOnce.err != nil {
		b.Fatal("measure the floor:", floorOnce.err)
	}
}

// quickFloorSamples is how many syncs a floor taken next to a benchmark is
// the median of (tens of milliseconds).
const quickFloorSamples = 400

var quickFloorDir struct {
	sync.Once
	dir string
	err error
}

// quickFloor measures the fdatasync floor now, briefly.
func quickFloor(b testing.TB) time.Duration {
	quickFloorDir.Do(func() {
		quickFloorDir.dir, quickFloorDir.err = os.MkdirTemp(workDir, "quickfloor")
	})
	if quickFloorDir.err != nil {
		b.Fatal(quickFloorDir.err)
	}
	d, err := measureFdatasync(quickFloorDir.dir, quickFloorSamples)
	if err != nil {
		b.Fatal("measure the floor:", err)
	}
	return d
}

func measureFdatasync(dir string, samples int) (time.Duration, error) {
	f, err := os.OpenFile(filepath.Join(dir, "floor"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	block := make([]byte, 4096)
	// Allocate the block and make it durable first: the samples then
	// measure a data write, not file growth.
	if _, err := f.WriteAt(block, 0); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	lats := make([]time.Duration, 0, samples)
	for i := 0; i < samples; i++ {
		block[0] = byte(i)
		t0 := time.Now()
		if _, err := f.WriteAt(block, 0); err != nil {
			return 0, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		lats = append(lats, time.Since(t0))
	}
	return median(lats), nil
}

func measureRenameSync(dir string) (time.Duration, error) {
	a, bdir := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{a, bdir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return 0, err
		}
	}
	if err := os.WriteFile(filepath.Join(a, "task"), nil, 0o600); err != nil {
		return 0, err
	}
	da, err := os.Open(a)
	if err != nil {
		return 0, err
	}
	defer da.Close()
	db, err := os.Open(bdir)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	from, to := da, db
	lats := make([]time.Duration, 0, floorSamples/2)
	for i := 0; i < floorSamples/2; i++ {
		t0 := time.Now()
		if err := unix.Renameat2(int(from.Fd()), "task", int(to.Fd()), "task", unix.RENAME_NOREPLACE); err != nil {
			return 0, err
		}
		if err := to.Sync(); err != nil {
			return 0, err
		}
		if err := from.Sync(); err != nil {
			return 0, err
		}
		lats = append(lats, time.Since(t0))
		from, to = to, from
	}
	return median(lats), nil
}
