// Command etcdbench is the etcd side of the benchmarks (bench/, `make
// bench`), in a process of its own: the bench test binary is also the
// helper process the baselines start once per step, and linking etcd's
// packages into it would add about 8 ms of start-up to every baseline
// step. The benchmarks build it and run it as:
//
//	etcdbench serve DIR
//	    start one embedded etcd member (journal/etcd/etcdtest) with its data
//	    under DIR, print "endpoints HOST:PORT" and serve until stdin closes
//	etcdbench tree -endpoints E -dir D -tasks N
//	    init a tree at D whose journal is in etcd at E, under a prefix of
//	    its own, and add N empty tasks
//	etcdbench library -endpoints E -dir D -tasks N -goroutines G [-trees T] [-made]
//	    the same tree (or, with -made, the one etcdbench tree made at D,
//	    so that the caller can measure the cycles' CPU alone), then N
//	    claim + complete cycles on G goroutines
//	    through the Go API, sharing one *fence.Tree (T=1: group commit) or
//	    one Tree each (T=G: G etcd clients that race); prints JSON: the
//	    cycles, the elapsed time, each Claim call's latency, the
//	    transactions a conflict made run again on a fresh snapshot
//	    (etcd.Retries) or at once on a moved head (etcd.Rebases), and the
//	    claims that lost every race until the store's timeout (run again)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
	"github.com/fencectl/fencectl/journal/record"
)

func main() {
	if len(os.Args) < 2 {
		fatal(fmt.Errorf("usage: etcdbench serve DIR | tree … | library …"))
	}
	// ETCDBENCH_CPUPROFILE=FILE writes a CPU profile of the command, to
	// see where an etcd claim's time goes.
	if p := os.Getenv("ETCDBENCH_CPUPROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "tree":
		fs := flag.NewFlagSet("tree", flag.ExitOnError)
		endpoints, dir, tasks := treeFlags(fs)
		fs.Parse(os.Args[2:])
		err = makeTree(*endpoints, *dir, *tasks)
	case "library":
		fs := flag.NewFlagSet("library", flag.ExitOnError)
		endpoints, dir, tasks := treeFlags(fs)
		goroutines := fs.Int("goroutines", 16, "claiming goroutines")
		trees := fs.Int("trees", 1, "1: one shared *fence.Tree; or one per goroutine")
		made := fs.Bool("made", false, "the tree at -dir is made already (etcdbench tree)")
		fs.Parse(os.Args[2:])
		if !*made {
			err = makeTree(*endpoints, *dir, *tasks)
		}
		if err == nil {
			err = library(*dir, *tasks, *goroutines, *trees)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	pprof.StopCPUProfile()
	fmt.Fprintln(os.Stderr, "etcdbench:", err)
	os.Exit(1)
}

func treeFlags(fs *flag.FlagSet) (endpoints, dir *string, tasks *int) {
	return fs.String("endpoints", "", "etcd endpoints, HOST:PORT[,HOST:PORT]"),
		fs.String("dir", "", "the tree's root"),
		fs.Int("tasks", 1000, "tasks to add")
}

// serve runs one etcd member until stdin closes (the benchmark ended, or
// died: either way the member goes with it).
func serve(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: etcdbench serve DIR")
	}
	c, err := etcdtest.StartIn(args[0], 1)
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Printf("endpoints %s\n", strings.Join(c.Endpoints(), ","))
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// makeTree inits dir with its journal in etcd under a prefix named for
// the directory and this process, and adds tasks, 16 at a time (group
// commit folds them into few transactions; fence halves a group that is
// too large for one).
func makeTree(endpoints, dir string, tasks int) error {
	cfg, err := fence.ParseJournalURL(fmt.Sprintf("etcd://%s/bench-%d-%s", endpoints, os.Getpid(), filepath.Base(filepath.Dir(dir))))
	if err != nil {
		return err
	}
	d := record.Defaults{TTL: fence.DefaultTTL, MaxAttempts: fence.DefaultMaxAttempts}
	if _, err := fence.InitTree(dir, d, fence.Options{Journal: &cfg}); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	tree, err := fence.Open(dir, fence.Options{})
	if err != nil {
		return err
	}
	defer tree.Close()
	var next atomic.Int64
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= tasks {
					errs <- nil
					return
				}
				if _, err := tree.Add(context.Background(), fence.AddRequest{ID: fmt.Sprintf("t%07d", i)}); err != nil {
					errs <- fmt.Errorf("add: %w", err)
					return
				}
			}
		}()
	}
	for range 16 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	return err
}

// Result is what `etcdbench library` prints.
type Result struct {
	Ops       int     `json:"ops"`
	ElapsedNS int64   `json:"elapsed_ns"`
	LatsNS    []int64 `json:"lats_ns"`  // one per Claim call
	Retries   int64   `json:"retries"`  // etcd.Retries during the cycles
	Rebases   int64   `json:"rebases"`  // runs made again at once on a moved head (etcd.Rebases)
	Other     int64   `json:"other"`    // conflicts run again on a fresh snapshot (etcd.OtherConflicts)
	Timeouts  int64   `json:"timeouts"` // claims that lost every race until the timeout, run again
}

// library runs the cycles on the tree at dir, made already.
func library(dir string, tasks, goroutines, trees int) error {
	open := make([]*fence.Tree, max(1, min(trees, goroutines)))
	for i := range open {
		t, err := fence.Open(dir, fence.Options{})
		if err != nil {
			return err
		}
		defer t.Close()
		open[i] = t
	}
	// A first claim on each tree connects its client: not timed.
	for _, t := range open {
		if _, err := t.Status(context.Background()); err != nil {
			return err
		}
	}
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lats     = make([]int64, 0, tasks)
		wg       sync.WaitGroup
		first    atomic.Pointer[error]
		timeouts atomic.Int64
	)
	retries, rebases := etcd.Retries.Load(), etcd.Rebases.Load()
	other := etcd.OtherConflicts.Load()
	start := time.Now()
	for w := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tree := open[w%len(open)]
			ctx := context.Background()
			var mine []int64
			defer func() { mu.Lock(); lats = append(lats, mine...); mu.Unlock() }()
			for first.Load() == nil {
				if int(next.Add(1)) > tasks {
					return
				}
				t0 := time.Now()
				c, err := tree.Claim(ctx, fence.ClaimRequest{Agent: fmt.Sprintf("lib-%d", w)})
				// A claim whose transaction lost every race until the
				// store's timeout fails as if etcd did not answer: an
				// agent runs it again; count it.
				for u := (*journal.UnreachableError)(nil); errors.As(err, &u); {
					timeouts.Add(1)
					c, err = tree.Claim(ctx, fence.ClaimRequest{Agent: fmt.Sprintf("lib-%d", w)})
				}
				mine = append(mine, int64(time.Since(t0)))
				if err == nil {
					_, err = tree.Complete(ctx, fence.FencedRequest{ID: c.Task.ID, Token: c.Token})
				}
				if err != nil {
					err = fmt.Errorf("goroutine %d: %w", w, err)
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := first.Load(); e != nil {
		return *e
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	return json.NewEncoder(out).Encode(Result{Ops: tasks, ElapsedNS: int64(elapsed), LatsNS: lats, Retries: etcd.Retries.Load() - retries, Timeouts: timeouts.Load(),
		Rebases: etcd.Rebases.Load() - rebases, Other: etcd.OtherConflicts.Load() - other})
}
