package main

import (
	"errors"
	"net"

	"github.com/urfave/cli/v2"
)

// serve's server (serve_server.go, serve_api.go, serve_page.go,
// serve_metrics.go) is linked unless the binary is built with -tags
// noserve: it brings net/http and the Prometheus client library, whose
// package initialisers would cost every short-lived command (a claim is
// one process start) about 1.5 ms, so `make build` leaves it out of
// fencectl, fencectl-etcd and fencectl-mcp and makes fencectl-serve,
// which `fencectl serve` runs instead, as `fencectl mcp` runs
// fencectl-mcp.

// runServe serves the tree until ctx ends (a signal); nil in a binary
// built without the server. addr is checked, loopback says whether it is
// a loopback one.
var runServe func(c *cli.Context, out *output, addr string, loopback bool) error

// errNoServe is what a binary built without the server says when no
// fencectl-serve can take over.
var errNoServe = errors.New("this fencectl was built without the web server (-tags noserve)")

// defaultHTTP is where serve listens unless --http says otherwise: the
// loopback interface only, since the page has no authentication.
const defaultHTTP = "127.0.0.1:7070"

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
                         without after: the newest N). N is at most 1000 (0: 1000);
                         header Fence-More: true when the answer stopped short
                         (with after: go on with ?after= the header
                         Fence-Last-Seq; without: older events precede
                         the newest N, read from the start with ?after=0)
   /api/stream           server-sent events: "event" per journal event after
                         ?after=SEQ (or Last-Event-ID), "status" after each change
   /metrics              Prometheus text format

Errors are the --json error object, with HTTP status 400 (invalid_input),
404 (no_such_task), 405 (a method other than GET or HEAD), 503 (busy) or
500. ?heartbeats takes true or false (1, 0, t, f; bare: true). serve
changes nothing in the tree and holds no lock between requests: each read
takes the shared lock briefly, and serve runs one read at a time, so that
many clients queue in serve and a writer gets the lock between their
reads. It wakes on journal changes (inotify on a bbolt journal, an etcd
watch on an etcd one); when it cannot watch, it says so and re-reads
every 2s.

It listens on 127.0.0.1:7070. The page and API have no authentication:
another address must be given with --http, and serve warns when it is not
a loopback one. On a loopback address it answers only requests for Host
localhost, *.localhost or a loopback IP (else 421), so that no web page
reaches it by DNS rebinding. Port 0 picks a free port; --addr-file writes
the address once listening (for scripts).

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
			if runServe == nil {
				if !exitsAfterRun {
					return errNoServe
				}
				return execBeside("fencectl-serve", errNoServe)
			}
			return runServe(c, out, addr, loopback)
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
