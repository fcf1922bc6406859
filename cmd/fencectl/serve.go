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

// defaultHTTP is where serve listens unless --http says otherwise: the
// loopback interface only, since the page has no authentication.
const defaultHTTP = "127.0.0.1:7070"

// fallbackEvery is how often serve re-reads the journal when it cannot
// watch it (no inotify instance left): the page then lags by up to this.
const fallbackEvery = 2 * time.Second

func serveCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "a read-only web dashboard, JSON API and Prometheus metrics for the tree",
		UsageText: "serve [--http ADDR] [--addr-file FILE]",
		Description: `Serves one tree over HTTP until interrupted (SIGINT or SIGTERM: exit 0):

   /                     the dashboard: counts, live leases, the event feed,
                         failed tasks; /task/ID is one task's page
   /api/status           status --json
   /api/tasks            list --json (?state=S&agent=A&after=ID&limit=N)
   /api/tasks/ID         show --json
   /api/tasks/ID/outputs           the task's outputs (name, size, modified)
   /api/tasks/ID/outputs/NAME      one output, as a download
   /api/events           log --json as an array (?after=SEQ&limit=N&task=ID&heartbeats=1;
                         without after: the newest N)
   /api/stream           server-sent events: "event" per journal event after
                         ?after=SEQ (or Last-Event-ID), "status" after each change
   /metrics              Prometheus text format

Errors are the --json error object, with HTTP status 400 (invalid_input),
404 (no_such_task), 503 (busy) or 500. serve changes nothing in the tree and
holds no lock between requests: each read takes the shared lock briefly. It
wakes on journal changes (inotify on a bbolt journal, an etcd watch on an
etcd one); when it cannot watch, it says so and re-reads every 2s.

It listens on 127.0.0.1:7070. The page and API have no authentication:
another address must be given with --http, and serve warns when it is not
a loopback one. Port 0 picks a free port; --addr-file writes the address
once listening (for scripts).

   fencectl serve
   fencectl serve --http 127.0.0.1:0 --addr-file /run/fencectl.addr
   fencectl serve --http 0.0.0.0:7070      # every interface: anyone who reaches it sees the tree
   curl -s localhost:7070/api/status | jq .counts`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http", Value: defaultHTTP, Usage: "address to listen on, HOST:PORT (a non-loopback host serves the tree, unauthenticated, to the network)"},
			&cli.StringFlag{Name: "addr-file", Usage: "write the address listened on to FILE once serving (with port 0, the port chosen)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("serve takes no arguments (got %q); use --http ADDR for the address", c.Args().Slice())
			}
			addr := c.String("http")
			loopback, err := checkListenAddr(addr)
			if err != nil {
				return err
			}
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
		},
	}
}

// checkListenAddr refuses an address that is not HOST:PORT and reports
// whether HOST is a loopback one ("localhost" or a loopback IP; an empty
// host is every interface).
func checkListenAddr(addr string) (loopback bool, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, usagef("invalid --http %q: give HOST:PORT, e.g. %s (port 0: any free port)", addr, defaultHTTP)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return false, usagef("invalid --http %q: the port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
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
