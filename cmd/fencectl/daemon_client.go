package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

// The client side of the daemon (daemon.go). On an etcd tree a command
// in its own process pays for the etcd client twice over: its start-up
// (package initialisers, about 3 ms of CPU) and a connection, and then it
// races every other process for the same keys, one transaction each. The
// everyday steps of an agent (daemonServes) go instead to one process per
// host and tree that keeps the connection and commits concurrent steps in
// groups; the command's process is then a plain fencectl that sends its
// command line and prints the answer. Anything the daemon cannot take the
// same way runs in the command's own process, as before.

// daemonServes are the commands a daemon runs: an agent's steps on a
// task, which read no file and no input of the caller's.
var daemonServes = map[string]bool{"claim": true, "heartbeat": true, "verify": true, "complete": true, "release": true, "fail": true}

// daemonRetries are the commands that may run again in their own process
// when the daemon ended before answering: they change nothing twice.
var daemonRetries = map[string]bool{"verify": true, "heartbeat": true}

// daemonWait bounds the wait for a daemon just started to listen.
const daemonWait = 2 * time.Second

// forwarded is the exit of a command a daemon ran: its output is written.
type forwarded struct{ code int }

func (f forwarded) Error() string { return fmt.Sprintf("the daemon's command exited %d", f.code) }

// daemonRequest is what a client sends: one JSON line.
type daemonRequest struct {
	Args []string          `json:"args"` // the command line, its program name first
	Env  map[string]string `json:"env"`  // the client's FENCE_* variables
	Root string            `json:"root"` // the tree, absolute
	// Timeout is the command's --timeout (after FENCE_TIMEOUT): the
	// daemon keeps a tree open per value (daemon.tree).
	Timeout time.Duration `json:"timeout"`
}

// daemonReply is what the daemon answers: a line saying it is ready,
// then one with the command's outcome; each one JSON line.
type daemonReply struct {
	Ready   bool   `json:"ready,omitempty"`   // the first line: send the request
	Decline string `json:"decline,omitempty"` // why the client must run it itself
	Stdout  []byte `json:"stdout,omitempty"`
	Stderr  []byte `json:"stderr,omitempty"`
	Code    int    `json:"code"`
}

// forward runs the command c parses in the host's daemon for its tree,
// starting one if none listens. ok is false when the command must run in
// this process instead: it is not one a daemon serves, daemons are off
// (FENCE_DAEMON=off), a test hook is set, or no daemon could be reached
// before the command was sent. Once it is sent, only a step that changes
// nothing twice (daemonRetries) runs here again after a lost answer.
func forward(c *cli.Context, backend string) (code int, ok bool, err error) {
	out := outputOf(c)
	if out == nil || out.served != nil || !daemonServes[c.Command.Name] {
		return 0, false, nil
	}
	switch v := os.Getenv("FENCE_DAEMON"); v {
	case "", "on":
	case "off":
		return 0, false, nil
	default:
		return 0, false, usagef("invalid FENCE_DAEMON=%q: on (the default: an etcd tree's steps go to the host's daemon) or off; fix or unset it", v)
	}
	if backend != "etcd" || !exitsAfterRun {
		return 0, false, nil
	}
	if c.Command.Name == "complete" && c.IsSet("result") || testHooksSet() {
		return 0, false, nil
	}
	if relativeTLSFiles() {
		// The daemon runs in /: a relative path would name another file
		// there.
		return 0, false, nil
	}
	root, err := filepath.Abs(c.String("dir"))
	if err != nil {
		return 0, false, nil
	}
	exe, err := daemonExecutable()
	if err != nil {
		return 0, false, nil // the hand-off says what is missing
	}
	name, err := daemonSocket(root, exe)
	if err != nil {
		return 0, false, nil
	}
	timeout, err := lockTimeout(c)
	if err != nil {
		return 0, false, err
	}
	// A claim for a reader that has gone is not made (claim_reader.go).
	if f, isFile := out.stdout.(*os.File); isFile && c.Command.Name == "claim" && noReader(f) {
		return 0, false, readerGoneError{}
	}
	code, ok, err = askDaemon(c, name, exe, daemonRequest{Args: out.args, Env: fenceEnv(), Root: root, Timeout: timeout})
	if !ok && err == nil {
		// Run here, and in fencectl-etcd if this binary hands the
		// command on: a daemon that failed or declined once is not
		// asked again by the same command.
		_ = os.Setenv("FENCE_DAEMON", "off")
	}
	return code, ok, err
}

// askDaemon runs req in the daemon at name (starting exe as one if none
// listens) and writes its output. ok is false, with nothing sent, when
// no daemon of this user said it was ready within daemonWait, or the
// daemon declined; and after a lost answer to a step that changes nothing
// twice (daemonRetries).
func askDaemon(c *cli.Context, name, exe string, req daemonRequest) (code int, ok bool, err error) {
	out := outputOf(c)
	conn, err := dialDaemon(name, exe, req.Root)
	if err != nil {
		return 0, false, nil
	}
	defer conn.Close()
	// The request carries the caller's variables, etcd credentials
	// included: only a daemon of this user may read them.
	if !samePeer(conn) {
		return 0, false, nil
	}
	// A daemon says it is ready before anything is sent: the kernel
	// accepts connections for a daemon that is stopped (SIGSTOP) or
	// leaving, which would never run the request; this one runs here.
	dec := json.NewDecoder(conn)
	_ = conn.SetReadDeadline(time.Now().Add(daemonWait))
	var hello daemonReply
	if err := dec.Decode(&hello); err != nil || !hello.Ready {
		return 0, false, nil
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return 0, false, nil // not sent whole: the daemon runs no half request
	}
	// The step is bounded by --timeout (and claim's --wait) in the daemon
	// as in its own process; a daemon that hangs past a generous bound is
	// given up on, as one that died.
	_ = conn.SetReadDeadline(time.Now().Add(answerWithin(c)))
	// A waiting claim whose reader leaves hangs up: the daemon cancels a
	// step whose client has gone, and nothing is claimed for nobody.
	left := watchReaderWhileWaiting(c, out, conn)
	var reply daemonReply
	err = dec.Decode(&reply)
	if left() && err != nil { // an answer that came is a claim made: print it
		return 0, false, fmt.Errorf("%w (stopped waiting)", readerGoneError{})
	}
	if err != nil {
		if daemonRetries[c.Command.Name] {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("the fencectl daemon for %s ended before answering (%v): the %s may or may not have happened; `fencectl show ID` tells (FENCE_DAEMON=off runs every command in its own process)", req.Root, err, c.Command.Name)
	}
	if reply.Decline != "" {
		return 0, false, nil
	}
	out.stdout.Write(reply.Stdout)
	out.stderr.Write(reply.Stderr)
	return reply.Code, true, nil
}

// relativeTLSFiles reports whether a FENCE_ETCD_* variable names a TLS
// file by a relative path.
func relativeTLSFiles() bool {
	for _, k := range []string{"FENCE_ETCD_CACERT", "FENCE_ETCD_CERT", "FENCE_ETCD_KEY"} {
		if v := os.Getenv(k); v != "" && !filepath.IsAbs(v) {
			return true
		}
	}
	return false
}

// answerWithin is how long a client waits for the daemon's answer:
// three times --timeout (10 s if 0) and claim's --wait, plus 30 s.
func answerWithin(c *cli.Context) time.Duration {
	timeout := c.Duration("timeout")
	if timeout <= 0 {
		timeout = fence.DefaultTimeout
	}
	wait := time.Duration(0)
	if c.Command.Name == "claim" {
		wait = c.Duration("wait")
	}
	return 3*timeout + wait + 30*time.Second
}

// testHooksSet reports whether a test hook of the fencetest build is set:
// those act on the process they are set in, so the command keeps to its
// own.
func testHooksSet() bool {
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FENCE_TEST_") || strings.HasPrefix(kv, "FENCE_CRASH") {
			return true
		}
	}
	return false
}

// fenceEnv is this process's FENCE_* variables: the settings a command
// reads from its environment, which the daemon reads from the request.
func fenceEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "FENCE_") {
			env[k] = v
		}
	}
	return env
}

// daemonExecutable is the program a daemon for an etcd tree runs: this
// one if it links the etcd backend, else fencectl-etcd beside it.
func daemonExecutable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if !fence.HasBackend("etcd") {
		if exe, err = besidePath("fencectl-etcd", errors.New("no etcd backend")); err != nil {
			return "", err
		}
	}
	return filepath.EvalSymlinks(exe)
}

// daemonSocket names the abstract unix socket of the daemon for root run
// by exe: one per user, tree, program and journal config. A new build or
// a tree made again (init, recover) gets a new daemon, and the old one,
// asked by nobody, leaves when idle.
func daemonSocket(root, exe string) (string, error) {
	prog, err := os.Stat(exe)
	if err != nil {
		return "", err
	}
	conf, err := os.Stat(filepath.Join(root, ".fence", "journal.json"))
	if err != nil {
		return "", err
	}
	st, ok := conf.Sys().(*syscall.Stat_t)
	if !ok {
		return "", errors.New("no inode")
	}
	h := sha256.New()
	fmt.Fprintf(h, "fencectl daemon 1\x00%d\x00%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d",
		os.Getuid(), root, exe, prog.Size(), prog.ModTime().UnixNano(), st.Dev, st.Ino, conf.Size(), conf.ModTime().UnixNano())
	return "@fencectl-" + hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// dialDaemon connects to the daemon at name, starting exe as one for
// root when none listens, and waits up to daemonWait for it.
func dialDaemon(name, exe, root string) (*net.UnixConn, error) {
	addr := &net.UnixAddr{Name: name, Net: "unix"}
	conn, err := net.DialUnix("unix", nil, addr)
	if err == nil {
		return conn, nil
	}
	if err := startDaemon(exe, root); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(daemonWait)
	for pause := 200 * time.Microsecond; ; pause = min(2*pause, 50*time.Millisecond) {
		conn, err := net.DialUnix("unix", nil, addr)
		if err == nil || time.Now().After(deadline) {
			return conn, err
		}
		time.Sleep(pause)
	}
}

// startDaemon starts `exe daemon --dir root` in a session of its own,
// with no terminal and no streams of ours (a caller waiting for this
// command's output must not wait for the daemon's), in / (it must keep
// no directory in use).
func startDaemon(exe, root string) error {
	cmd := exec.Command(exe, "daemon", "--dir", root)
	cmd.Args[0] = "fencectl" // the name this program answers to (a test binary too)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}
