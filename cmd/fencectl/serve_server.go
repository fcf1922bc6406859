//go:build !noserve

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
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
	var live atomic.Bool
	t, err := openServeTree(c, out, &live)
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
	s := newServer(t, out)
	return s.serve(ctx, ln, c.String("addr-file"))
}

// openServeTree opens the tree as openTree does. The notices met before
// serving starts (a tree's permissions) are collected as every command's
// are, so that an error at start carries them; once serving (live is
// set), they are printed as they come, not kept for an exit hours away.
func openServeTree(c *cli.Context, out *output, live *atomic.Bool) (*fence.Tree, error) {
	timeout, err := lockTimeout(c)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	o := fence.Options{Timeout: timeout, Clock: testClock, Notify: func(n fence.Notice) {
		mu.Lock()
		defer mu.Unlock()
		out.notice(n)
		if live.Load() {
			out.flushNotices()
		}
	}}
	if os.Getenv("FENCE_LOCK_MODE") == "bbolt" {
		o.Backend = boltstore.Backend{LockMode: boltstore.LockBoltOnly}
	}
	return fence.Open(c.String("dir"), o)
}

// server is one serve: the tree, the feed of journal changes that wakes
// the streams, and the metrics.
type server struct {
	tree   *fence.Tree
	out    *output
	feed   *feed
	counts *eventCounts
}

func newServer(t *fence.Tree, out *output) *server {
	return &server{tree: t, out: out, feed: newFeed(), counts: newEventCounts()}
}

// changed is what serve does when the journal changed: fold the new
// events into the counts (observing how long each took to be seen), then
// wake the streams.
func (s *server) changed(ctx context.Context) {
	_ = s.counts.catchUp(ctx, s.tree) // a failed read is retried at the next change or scrape
	s.feed.wake()
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
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("write --addr-file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
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

// errServeStopped ends a stream when serve stops.
var errServeStopped = errors.New("serve stopped")
