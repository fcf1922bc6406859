//go:build !noserve

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// The server of `fencectl serve`: in fencectl-serve, and in any binary
// built without -tags noserve (the tests' binary; see serve.go).

func init() { runServe = serveTree }

// fallbackEvery is how often serve re-reads the journal when it cannot
// watch it (no inotify instance left): the page then lags by up to this.
const fallbackEvery = 2 * time.Second

// serveTree opens the tree and serves it on addr until a signal.
func serveTree(c *cli.Context, out *output, addr string, loopback bool) error {
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	timeout, err := lockTimeout(c)
	if err != nil {
		return err
	}
	var live atomic.Bool
	t, err := openServeTree(c, out, timeout, &live)
	if err != nil {
		return err
	}
	defer t.Close()
	// A tree that cannot be read now is an error now, not a page
	// of errors later.
	if _, err := t.Status(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another serve running? choose another port with --http)", addr, err)
	}
	if !loopback {
		fmt.Fprintf(out.stderr, "fencectl: warning: serving on %s, not a loopback address: the dashboard and API have no authentication, so anyone who can reach it reads every task, agent and output of the tree\n", ln.Addr())
	}
	live.Store(true)
	out.flushNotices()
	s := newServer(t, out, loopback, timeout)
	return s.serve(ctx, ln, c.String("addr-file"))
}

// openServeTree opens the tree as openTree does. The notices met before
// serving starts (a tree's permissions) are collected as every command's
// are, so that an error at start carries them; once serving (live is
// set), they are printed as they come, not kept for an exit hours away.
func openServeTree(c *cli.Context, out *output, timeout time.Duration, live *atomic.Bool) (*fence.Tree, error) {
	var mu sync.Mutex
	o := fence.Options{Timeout: timeout, Clock: testClock, Notify: func(n fence.Notice) {
		mu.Lock()
		defer mu.Unlock()
		out.notice(n)
		if live.Load() {
			out.flushNotices()
		}
	}}
	if err := setLockMode(&o, c.String("dir"), getenv(c, "FENCE_LOCK_MODE")); err != nil {
		return nil, err
	}
	return fence.Open(c.String("dir"), o)
}

// server is one serve: the tree (read through the gate), the feed of
// journal changes that wakes the streams, and the metrics. loopback says
// that it listens on a loopback address, so that it answers loopback
// Host names only (see loopbackOnly).
type server struct {
	tree     *readGate
	out      *output
	feed     *feed
	counts   *eventCounts
	loopback bool
}

// newServer serves t; timeout is the lock's (--timeout), which bounds
// a read's wait for its turn too (see readGate).
func newServer(t *fence.Tree, out *output, loopback bool, timeout time.Duration) *server {
	return &server{tree: newReadGate(t, timeout), out: out, feed: newFeed(), counts: newEventCounts(), loopback: loopback}
}

// changed is what serve does when the journal changed: fold the new
// events into the counts (observing how long each took to be seen), then
// wake the streams.
func (s *server) changed(ctx context.Context) {
	_ = s.counts.catchUp(ctx, s.tree) // a failed read is retried at the next change or scrape
	s.feed.wake()
}

// maxReads is how many journal reads serve runs at once: one, since a
// read is short (a page of events at most) and every other one in flight
// narrows a writer's way in.
const maxReads = 1

// readGate is the tree as serve reads it: every read waits for one of
// maxReads turns first. A read holds the journal's shared lock, and
// flock lets a new reader in while a writer waits, so the reads of many
// clients, each under its own shared lock and overlapping the next, would
// keep the lock held without a gap: a claim by another process would
// wait out its --timeout and fail busy. Queued here, serve's reads leave
// the lock free between one another. serve reads the journal through
// these methods only; the ones of the tree it passes on (Root, Path,
// Journal, Watch) read no journal.
type readGate struct {
	*fence.Tree
	turns chan struct{}
	wait  time.Duration // how long a read waits for its turn before busy
}

// newReadGate gates t's reads; a read waits for its turn as long as for
// the lock (timeout; --timeout 0, "try once", waits the default instead,
// or a page's few requests at once would be refused).
func newReadGate(t *fence.Tree, timeout time.Duration) *readGate {
	if timeout <= 0 {
		timeout = fence.DefaultTimeout
	}
	return &readGate{Tree: t, turns: make(chan struct{}, maxReads), wait: timeout}
}

// gated runs read in its turn: once a turn is free, or busy after g.wait
// (a stuck lock makes every read in the queue wait its own timeout), or
// ctx's error when the client left.
func gated[T any](ctx context.Context, g *readGate, read func() (T, error)) (T, error) {
	var zero T
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case g.turns <- struct{}{}:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-timer.C:
		return zero, fmt.Errorf("serve: no turn to read the journal within %s, other reads queued before it: %w", g.wait, fence.ErrBusy)
	}
	defer func() { <-g.turns }()
	return read()
}

func (g *readGate) Status(ctx context.Context) (fence.Status, error) {
	return gated(ctx, g, func() (fence.Status, error) { return g.Tree.Status(ctx) })
}

func (g *readGate) Gauges(ctx context.Context) (fence.Gauges, error) {
	return gated(ctx, g, func() (fence.Gauges, error) { return g.Tree.Gauges(ctx) })
}

func (g *readGate) List(ctx context.Context, f fence.ListFilter) (fence.ListPage, error) {
	return gated(ctx, g, func() (fence.ListPage, error) { return g.Tree.List(ctx, f) })
}

func (g *readGate) Show(ctx context.Context, id string) (fence.TaskView, error) {
	return gated(ctx, g, func() (fence.TaskView, error) { return g.Tree.Show(ctx, id) })
}

func (g *readGate) Log(ctx context.Context, f fence.LogFilter) ([]record.Event, error) {
	return gated(ctx, g, func() ([]record.Event, error) { return g.Tree.Log(ctx, f) })
}

func (g *readGate) EventsAfter(ctx context.Context, after uint64, limit int, heartbeats bool) (fence.EventPage, error) {
	return gated(ctx, g, func() (fence.EventPage, error) { return g.Tree.EventsAfter(ctx, after, limit, heartbeats) })
}

// serve runs the HTTP server on ln until ctx ends, then shuts it down.
func (s *server) serve(ctx context.Context, ln net.Listener, addrFile string) error {
	changes, err := s.tree.Watch()
	var changed <-chan struct{}
	var tick <-chan time.Time
	if err != nil {
		fmt.Fprintf(s.out.stderr, "fencectl: warning: %v; serve re-reads the journal every %s instead\n", err, fallbackEvery)
		ticker := time.NewTicker(fallbackEvery)
		defer ticker.Stop()
		tick = ticker.C
	} else {
		defer changes.Close()
		changed = changes.C()
	}
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	// The backlog of the log is counted before serving, so that the
	// commit latency observes only what comes after.
	if err := s.counts.catchUp(ctx, s.tree); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/"
	if addrFile != "" {
		if err := writeAddrFile(addrFile, ln.Addr().String()); err != nil {
			srv.Close()
			return err
		}
	}
	fmt.Fprintf(s.out.stderr, "fencectl: serving %s on %s (read-only; Ctrl-C stops)\n", s.tree.Root(), url)
	for {
		select {
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.feed.close() // the streams end, so Shutdown need not wait for them
			_ = srv.Shutdown(shut)
			return nil
		case err := <-errc:
			return fmt.Errorf("serve: %w", err)
		case <-changed:
			s.changed(ctx)
		case <-tick:
			s.changed(ctx)
		}
	}
}

// writeAddrFile writes addr to path atomically (a reader never sees half
// of it): to a temporary file beside it, then a rename.
func writeAddrFile(path, addr string) error {
	// A new file of a name nobody can guess, never one that is there: a
	// fixed PATH.tmp in a shared directory was a symlink another user
	// planted, and the write went to the file it named (found from
	// outside).
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write --addr-file: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(0o644)
	if err == nil {
		_, err = f.WriteString(addr + "\n")
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write --addr-file: %w", err)
	}
	return nil
}

// feed wakes every stream after the journal changed: each one waits on
// the channel Wait returns, which wake closes (and replaces).
type feed struct {
	mu     sync.Mutex
	ch     chan struct{}
	closed bool
}

func newFeed() *feed { return &feed{ch: make(chan struct{})} }

// Wait returns a channel closed at the next change (or at close), and
// whether the feed is still open.
func (f *feed) Wait() (<-chan struct{}, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch, !f.closed
}

func (f *feed) wake() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	close(f.ch)
	f.ch = make(chan struct{})
}

func (f *feed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.ch)
	}
}
