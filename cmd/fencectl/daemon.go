package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/cmd/internal/daemonlink"
	"github.com/fencectl/fencectl/fence"
)

// The daemon: one process per host, user and tree that runs the agents'
// steps for the commands of that host (daemon_client.go, cmd/front). It
// runs each command as its own process would, with the client's command
// line and variables, on trees it keeps open: concurrent steps committed
// in groups, as a library process with many goroutines commits them, and
// on etcd one connection for every command. Its clients are the fencectl
// front, which sends every tree's steps here and so starts no more than a
// Go program must, and on an etcd tree the full command set too. It
// serves only the user that runs it, and leaves when idle, when its tree
// is made again, or when its program is replaced.

// maxDaemonTrees bounds the trees a daemon keeps open (one per
// --timeout value); a command with another value runs in its own process.
const maxDaemonTrees = 4

// daemonIdle is how long a daemon stays without a command by default.
const daemonIdle = 30 * time.Second

func daemonCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "daemon",
		Usage:     "run this host's agent steps on a tree, committed in groups (started on demand)",
		UsageText: "daemon [--idle D]",
		Description: `claim, heartbeat, verify, complete, release and fail go to a daemon: one
process per host, user and tree that keeps the tree open (on etcd, its
connection) and commits concurrent steps in groups, so that each step's
process only starts, sends its command line and prints the answer. The
first such step starts it; it leaves after --idle without a command. Each
command is run exactly as in its own process (same output, exit code and
--json), with the caller's command line and FENCE_* variables. You never
need to start it; FENCE_DAEMON=off runs every command in its own process.

   fencectl daemon --idle 5m     # keep one up between bursts of work`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "idle", Value: daemonIdle, Usage: "leave after this long without a command"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("daemon takes no arguments: usage: %s", c.Command.UsageText)
			}
			if c.Duration("idle") <= 0 {
				return usagef("invalid --idle %s: must be positive", c.Duration("idle"))
			}
			return serveDaemon(c.Context, out, c.String("dir"), c.Duration("idle"))
		},
	}
}

// daemonRun is runOut, set at init: the command table refers to this file.
var daemonRun func(context.Context, []string, *output) int

func init() { daemonRun = runOut }

// parseMu lets one command at a time parse its command line: urfave/cli
// writes to its help and version flags, which every app shares, as it
// parses. The command's Before ends the turn (output.parsed), so that the
// steps themselves run side by side.
var parseMu sync.Mutex

// parseAlone takes the turn to parse and returns what gives it back
// (once, however often it is called).
func parseAlone() func() {
	parseMu.Lock()
	return sync.OnceFunc(parseMu.Unlock)
}

// served is what a daemon gives a command it runs (output.served).
type served struct {
	env  map[string]string // the client's FENCE_* variables
	root string            // the tree, absolute
	cwd  string            // the client's working directory, if it sent it
	tree func(timeout time.Duration) (*fence.Tree, error)
	// declined says why the command was not run here after all
	// (checkServedTree): the client runs it in its own process.
	declined string
	// undo is the claims the answer carries (daemonlink.Reply.Undo).
	undo string
}

// errDeclined ends a command the daemon declines once it has read its
// command line; nothing was done, and the client is told why.
var errDeclined = errors.New("declined by the daemon")

// checkServedTree declines a command whose command line names another
// tree than the one this daemon serves. A client that does not read the
// command line as fencectl does (the front guesses the tree from --dir
// and FENCE_DIR) sends its working directory, and the tree its own
// process would open is the one the command runs on, or none.
func checkServedTree(c *cli.Context) error {
	out := outputOf(c)
	if out == nil || out.served == nil || out.served.cwd == "" {
		return nil
	}
	dir := c.String("dir")
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(out.served.cwd, dir)
	}
	if filepath.Clean(dir) != out.served.root {
		out.served.declined = "the command line names another tree"
		return errDeclined
	}
	return nil
}

// daemon serves one tree.
type daemon struct {
	root, exe, name string
	work            chan *net.UnixConn // to a worker waiting for a command (worker)
	treeMu          sync.Mutex
	trees           map[time.Duration]*treeSlot // by --timeout
	mu              sync.Mutex                  // guards inflight, conns and last
	inflight        map[*output]bool            // the commands running, for notices
	conns           int                         // the clients connected
	last            time.Time                   // when the last one left
}

// serveDaemon listens for the commands of dir's clients until idle.
func serveDaemon(ctx context.Context, out *output, dir string, idle time.Duration) error {
	closeInherited()
	root, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	cfg, found, err := fence.TreeJournal(root)
	if err != nil {
		return err
	}
	if found && !fence.HasBackend(cfg.Backend) {
		return &fence.MissingDriverError{Backend: cfg.Backend}
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return err
	}
	name, err := daemonlink.Socket(root, exe)
	if err != nil {
		return err
	}
	d := &daemon{root: root, exe: exe, name: name, work: make(chan *net.UnixConn), trees: map[time.Duration]*treeSlot{}, inflight: map[*output]bool{}, last: time.Now()}
	ln, err := net.Listen("unix", name)
	if errors.Is(err, syscall.EADDRINUSE) {
		fmt.Fprintf(out.stdout, "a daemon already serves %s\n", root)
		return nil
	}
	if err != nil {
		return err
	}
	defer ln.Close()
	defer d.closeTrees()
	fmt.Fprintf(out.stdout, "serving %s at %s\n", root, name)
	ul := ln.(*net.UnixListener)
	for {
		_ = ul.SetDeadline(time.Now().Add(time.Second))
		conn, err := ul.AcceptUnix()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				if d.done(idle) {
					return nil
				}
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ENOBUFS) {
				// Out of descriptors for a moment (steps in flight hold
				// many): the connection waits in the queue. Leaving would
				// fail every step in flight, their claims made for nobody
				// (found from outside, with a large inbox/ drop).
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		// Counted from the accept: a daemon with a client between its
		// ready line and its request must not leave.
		d.mu.Lock()
		d.conns++
		d.mu.Unlock()
		select {
		case d.work <- conn:
		default:
			go d.worker(ctx, conn)
		}
	}
}

// workerIdle is how long a worker waits for its next command.
const workerIdle = 5 * time.Second

// worker runs conn's command, then the next ones handed to it, until none
// comes for workerIdle. A command runs deep (urfave/cli, the tree, bbolt):
// a goroutine of its own per command grew its stack, copying it, several
// times for each (5% of the daemon's CPU per claim); a worker's stack
// stays grown.
func (d *daemon) worker(ctx context.Context, conn *net.UnixConn) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		d.handle(ctx, conn)
		idle.Reset(workerIdle)
		select {
		case conn = <-d.work:
		case <-idle.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// done reports whether the daemon should leave: no command in flight,
// and none for idle, or its tree or program is no longer the one its
// clients would ask for (gone, made again, replaced).
func (d *daemon) done(idle time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conns > 0 {
		return false
	}
	if time.Since(d.last) > idle {
		return true
	}
	name, err := daemonlink.Socket(d.root, d.exe)
	return err != nil || name != d.name
}

// treeSlot is the tree of one --timeout value, opened by the first
// command that needs it; its own lock, so that a tree that takes its
// whole timeout to open (etcd unreachable) keeps no command of another
// timeout waiting.
type treeSlot struct {
	mu sync.Mutex
	t  *fence.Tree
}

// tree returns the open tree for commands given timeout, opening it
// for the first. What Open warns of, each command hears from served.tree.
func (d *daemon) tree(timeout time.Duration) (*fence.Tree, error) {
	d.treeMu.Lock()
	slot, ok := d.trees[timeout]
	if !ok {
		slot = &treeSlot{}
		d.trees[timeout] = slot
	}
	d.treeMu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.t != nil && slot.t.JournalMoved() {
		// A recover pointed the tree at another journal: open it anew.
		slot.t.Close()
		slot.t = nil
	}
	if slot.t != nil {
		return slot.t, nil
	}
	var opened atomic.Bool
	notify := func(n fence.Notice) {
		if opened.Load() {
			d.notify(n)
		}
	}
	t, err := fence.Open(d.root, fence.Options{Timeout: timeout, Notify: notify, Clock: testClock, Boot: testBoot})
	if err != nil {
		return nil, err
	}
	opened.Store(true)
	slot.t = t
	return t, nil
}

func (d *daemon) closeTrees() {
	d.treeMu.Lock()
	defer d.treeMu.Unlock()
	for k, slot := range d.trees {
		slot.mu.Lock()
		if slot.t != nil {
			slot.t.Close()
		}
		slot.mu.Unlock()
		delete(d.trees, k)
	}
}

// notify tells a notice to every command in flight: a tree shared by
// several has no way to know whose step it came from.
func (d *daemon) notify(n fence.Notice) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for out := range d.inflight {
		out.notice(n)
	}
}

// maxRequest bounds a request: a command line and its variables.
const maxRequest = 1 << 20

// handle runs one client's command. The client's user is checked before
// anything is read from it.
func (d *daemon) handle(ctx context.Context, conn *net.UnixConn) {
	defer d.hangUp(conn)
	enc := json.NewEncoder(conn)
	if !samePeer(conn) {
		_ = enc.Encode(daemonlink.Reply{Decline: "another user"})
		return
	}
	if err := enc.Encode(daemonlink.Reply{Ready: true}); err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var req daemonlink.Request
	if err := json.NewDecoder(io.LimitReader(conn, maxRequest)).Decode(&req); err != nil {
		// Too long, or cut off: nothing is run, and a client still
		// there runs it in its own process (a hang-up would tell it the
		// step may have happened).
		_ = enc.Encode(daemonlink.Reply{Decline: "request unreadable: " + err.Error()})
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	if why := d.decline(req); why != "" {
		_ = enc.Encode(daemonlink.Reply{Decline: why})
		return
	}
	// A client that goes away (killed, interrupted) cancels its command,
	// as its own process would have ended with it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The hang-up read below cancels ctx, but a daemon stopped while the
	// step waited may run it on before that read is scheduled: the step's
	// group asks the socket itself, right before it makes anything.
	ctx = fence.WithCaller(ctx, func() bool { return hungUp(conn) })
	go func() {
		var b [1]byte
		_, _ = conn.Read(b[:])
		cancel()
	}()
	var stdout, stderr bytes.Buffer
	out := &output{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
		served: &served{env: req.Env, root: d.root, cwd: req.Cwd, tree: d.tree}, noticeMu: &sync.Mutex{}}
	d.begin(out)
	code := daemonRun(ctx, req.Args, out)
	d.end(out)
	if why := out.served.declined; why != "" {
		_ = enc.Encode(daemonlink.Reply{Decline: why})
		return
	}
	_ = enc.Encode(daemonlink.Reply{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Code: code, Undo: out.served.undo})
}

// hungUp reports whether the client of conn has hung up (or its
// connection failed), without reading what it may still have sent.
func hungUp(conn *net.UnixConn) bool {
	gone, err := pollSays(conn, unix.POLLRDHUP, unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR)
	return err != nil || gone
}

// hangUp closes a client's connection and counts it gone.
func (d *daemon) hangUp(conn *net.UnixConn) {
	conn.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conns--
	d.last = time.Now()
}

func (d *daemon) begin(out *output) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inflight[out] = true
}

func (d *daemon) end(out *output) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.inflight, out)
	d.last = time.Now()
}

// decline says why the client must run req itself, or "".
func (d *daemon) decline(req daemonlink.Request) string {
	if req.Root != d.root {
		return "another tree"
	}
	if !daemonlink.Serves[commandWord(req.Args)] {
		return "not a command the daemon runs"
	}
	// Each --timeout value has a tree of its own, with its own etcd
	// connection: a few, not one per value a script may compute.
	d.treeMu.Lock()
	_, open := d.trees[req.Timeout]
	full := len(d.trees) >= maxDaemonTrees
	d.treeMu.Unlock()
	if !open && full {
		return "too many --timeout values"
	}
	// The daemon's trees were opened with the default lock; the
	// benchmarks' other one (FENCE_LOCK_MODE) is a process's own.
	if req.Env["FENCE_LOCK_MODE"] != "" {
		return "FENCE_LOCK_MODE is set"
	}
	// The connection was made with this process's credentials and TLS
	// files: a client with others must use its own.
	for _, k := range []string{"FENCE_ETCD_USERNAME", "FENCE_ETCD_PASSWORD", "FENCE_ETCD_CACERT", "FENCE_ETCD_CERT", "FENCE_ETCD_KEY"} {
		if req.Env[k] != os.Getenv(k) {
			return "other etcd credentials"
		}
	}
	return ""
}

// closeInherited closes the descriptors this process was started with
// besides its standard streams: whatever the first client's own caller
// left open (a lock file of a cron wrapper, a pipe another reader waits
// to see closed) must not stay open for as long as the daemon runs.
// Those are the descriptors without close-on-exec; every one the Go
// runtime opens has it.
func closeInherited() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			_ = unix.Close(fd)
		}
	}
}

// samePeer reports whether the other end of conn runs as this process's
// user: an abstract socket has no file mode to keep others out, nor to
// keep another user from listening where a client looks for its daemon.
func samePeer(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return false
	}
	return int(cred.Uid) == os.Getuid()
}
