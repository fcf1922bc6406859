package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencectl/fencectl/cmd/internal/daemonlink"
)

// off hands a command on to run in fencectl-full's own process, which
// then asks no daemon either: one that failed or declined once is not
// asked again by the same command.
var off = map[string]string{"FENCE_DAEMON": "off"}

// maxReply bounds the answer read back: a command's output.
const maxReply = 64 << 20

// send runs s in the host's daemon for its tree, starting one if none
// listens, and writes its output. done is false when nothing was sent:
// the tree's journal is not one the front knows how to route. Every
// other way of not getting an answer hands the command on (handOn), and
// so does not return: when nothing was sent, or a step that changes
// nothing twice lost its answer, to run it; when a step that may have
// happened lost its answer, to report that, and run nothing.
func send(s step) (code int, done bool) {
	exe, ok := daemonProgram(s.root)
	if !ok {
		return 0, false
	}
	name, err := daemonlink.Socket(s.root, exe)
	if err != nil {
		return 0, false // no tree there: fencectl-full says so
	}
	c, err := dial(name, exe, s.root)
	if err != nil {
		handOn(off)
	}
	defer c.close()
	// The request carries the caller's variables, etcd credentials
	// included: only a daemon of this user may read them.
	if !c.samePeer() {
		handOn(off)
	}
	// A daemon says it is ready before anything is sent: the kernel
	// accepts connections for a daemon that is stopped (SIGSTOP) or
	// leaving, which would never run the request.
	if hello, err := c.read(daemonlink.HelloWithin(s.timeout)); err != nil || !hello.Ready {
		handOn(off)
	}
	req := daemonlink.AppendRequest(nil, daemonlink.Request{Args: os.Args, Env: s.env, Root: s.root, Cwd: s.cwd, Timeout: s.timeout})
	if c.write(append(req, '\n')) != nil {
		handOn(off) // not sent whole: the daemon runs no half request
	}
	// The step is bounded by --timeout in the daemon as in its own
	// process; a daemon that hangs past a generous bound is given up on,
	// as one that died.
	reply, err := c.read(daemonlink.AnswerWithin(s.timeout, 0))
	if err != nil {
		if daemonlink.Retries[s.command] {
			handOn(off)
		}
		handOn(map[string]string{daemonlink.LostVar: daemonlink.LostError(s.root, s.command, err)})
	}
	if reply.Decline != "" {
		handOn(off)
	}
	_, werr := os.Stdout.Write(reply.Stdout)
	_, _ = os.Stderr.Write(reply.Stderr)
	if werr != nil && reply.Undo != "" {
		// Nobody can read these claims' tokens: fencectl-full releases
		// them and says why (daemonlink.UndeliveredVar).
		handOn(map[string]string{daemonlink.UndeliveredVar: errText(werr) + "\n" + reply.Undo, "FENCE_DAEMON": "off"})
	}
	if werr != nil && reply.Code == 0 {
		// Done, its answer lost: fencectl-full reports it (exit 1).
		handOn(map[string]string{daemonlink.LostVar: daemonlink.AnswerLostError(s.command, werr, reply.Stdout), "FENCE_DAEMON": "off"})
	}
	return reply.Code, true
}

// daemonProgram is the program whose daemon serves the tree at root:
// fencectl-full for a bbolt tree, fencectl-etcd for an etcd one. ok is
// false for a tree the front cannot route (a config it cannot read, or
// another backend): fencectl-full then decides.
func daemonProgram(root string) (exe string, ok bool) {
	prog := fullName
	conf := filepath.Join(root, ".fence", daemonlink.ConfigFile)
	fi, err := os.Lstat(conf)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil || !fi.Mode().IsRegular():
		return "", false
	default:
		b, err := os.ReadFile(conf)
		if err != nil {
			return "", false
		}
		if backend, err := daemonlink.ConfigBackend(b); err != nil || backend != "etcd" {
			return "", false
		}
		prog = "fencectl-etcd"
	}
	path, err := beside(prog)
	if err != nil {
		return "", false
	}
	if path, err = filepath.EvalSymlinks(path); err != nil {
		return "", false
	}
	return path, true
}

// conn is a connection to a daemon, read a JSON line at a time. Its
// socket is non-blocking and waited on through the Go runtime's poller:
// a goroutine blocked in a plain read(2) keeps its P in a system call,
// and the runtime's monitor thread then wakes every 20 µs to see whether
// to take it back, which cost a step more CPU than the rest of its wait;
// parked in the poller, every P is idle and the monitor sleeps.
type conn struct {
	fd  int
	f   *os.File
	buf []byte
}

// dial connects to the daemon at name, starting exe as one for root
// when none listens, and waits up to daemonlink.Wait for it. It waits
// only while there is something to wait for: where this process may not
// use a unix socket at all (a sandbox's seccomp or LSM rules: the
// socket or the connect is refused outright), no daemon is started, and
// once the daemon started here has exited (it could not listen, or
// another had just started: then that one is asked once more), the
// wait ends. Either way the step then runs in its own process, at once
// rather than 2 s later.
func dial(name, exe, root string) (*conn, error) {
	c, err := connect(name)
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || os.Getenv("FENCE_DAEMON") == daemonlink.Existing || !daemonlink.CanStartDaemon() {
		return c, err
	}
	pid, err := startDaemon(exe, root)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(daemonlink.Wait)
	for pause := 200 * time.Microsecond; ; pause = min(2*pause, 50*time.Millisecond) {
		c, err := connect(name)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		var ws syscall.WaitStatus
		if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
			return connect(name)
		}
		time.Sleep(pause)
	}
}

func connect(name string) (*conn, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	// A name starting with @ is an abstract socket. A unix socket
	// connects at once, or fails: non-blocking, a daemon whose queue of
	// connections is full (stopped, SIGSTOP, with thousands of steps
	// left waiting) answers EAGAIN instead of keeping this step waiting
	// for good; the step then runs in its own process.
	if err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: name}); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	return &conn{fd: fd, f: os.NewFile(uintptr(fd), "daemon")}, nil
}

func (c *conn) close() { _ = c.f.Close() }

// errText is err's message on one line.
func errText(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// startDaemon starts `exe daemon --dir root` in a session of its own,
// with no terminal and none of our streams (a caller waiting for this
// command's output must not wait for the daemon's), in / (it must keep
// no directory in use), and returns its pid.
func startDaemon(exe, root string) (int, error) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	fd := null.Fd()
	return syscall.ForkExec(exe, []string{"fencectl", "daemon", "--dir", root}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   os.Environ(),
		Files: []uintptr{fd, fd, fd},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
}

// samePeer reports whether the daemon runs as this process's user: an
// abstract socket has no file mode to keep another user from listening
// where a client looks for its daemon.
func (c *conn) samePeer() bool {
	cred, err := syscall.GetsockoptUcred(c.fd, syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	return err == nil && int(cred.Uid) == os.Getuid()
}

// write sends b whole, or fails (a socket's EPIPE is an error, no
// signal: only standard output and error raise SIGPIPE in Go).
func (c *conn) write(b []byte) error {
	_, err := c.f.Write(b)
	return err
}

// read reads the daemon's next line, waiting up to within.
func (c *conn) read(within time.Duration) (daemonlink.Reply, error) {
	if err := c.f.SetReadDeadline(time.Now().Add(within)); err != nil {
		return daemonlink.Reply{}, err
	}
	chunk := make([]byte, 8<<10) // on the heap: a stack this size would be grown and copied
	for {
		if i := bytes.IndexByte(c.buf, '\n'); i >= 0 {
			line := c.buf[:i]
			c.buf = c.buf[i+1:]
			return daemonlink.ParseReply(line)
		}
		if len(c.buf) > maxReply {
			return daemonlink.Reply{}, fmt.Errorf("an answer longer than %d bytes", maxReply)
		}
		n, err := c.f.Read(chunk)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return daemonlink.Reply{}, fmt.Errorf("no answer within %s", within)
		case err == io.EOF:
			return daemonlink.Reply{}, io.ErrUnexpectedEOF
		case err != nil:
			return daemonlink.Reply{}, err
		}
		c.buf = append(c.buf, chunk[:n]...)
	}
}
