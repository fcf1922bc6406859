package main

import (
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

	"github.com/fencectl/fencectl/cmd/internal/daemonlink"
	"github.com/fencectl/fencectl/fence"
)

// The client side of the daemon (daemon.go). On an etcd tree a command
// in its own process pays for the etcd client twice over: its start-up
// (package initialisers, about 3 ms of CPU) and a connection, and then it
// races every other process for the same keys, one transaction each. The
// everyday steps of an agent (daemonlink.Serves) go instead to one process per
// host and tree that keeps the connection and commits concurrent steps in
// groups; the command's process is then a plain fencectl that sends its
// command line and prints the answer. Anything the daemon cannot take the
// same way runs in the command's own process, as before.

// forwarded is the exit of a command a daemon ran: its output is written.
type forwarded struct{ code int }

func (f forwarded) Error() string { return fmt.Sprintf("the daemon's command exited %d", f.code) }

// forward runs the command c parses in the host's daemon for its tree,
// starting one if none listens. ok is false when the command must run in
// this process instead: it is not one a daemon serves, daemons are off
// (FENCE_DAEMON=off), a test hook is set, or no daemon could be reached
// before the command was sent. Once it is sent, only a step that changes
// nothing twice (daemonlink.Retries) runs here again after a lost answer.
func forward(c *cli.Context, backend string) (code int, ok bool, err error) {
	out := outputOf(c)
	if out == nil || out.served != nil || !daemonlink.Serves[c.Command.Name] {
		return 0, false, nil
	}
	// The front sent this step to a daemon that ended before answering,
	// and hands it here to be reported, not run (cmd/front).
	if lost := os.Getenv(daemonlink.LostVar); lost != "" {
		return 0, false, errors.New(lost)
	}
	if err := checkDaemonVar(); err != nil {
		return 0, false, err
	}
	if os.Getenv("FENCE_DAEMON") == "off" {
		return 0, false, nil
	}
	if backend != "etcd" || !exitsAfterRun {
		return 0, false, nil
	}
	env := daemonlink.FenceEnv()
	if c.Command.Name == "complete" && c.IsSet("result") || daemonlink.TestHooksSet(env) {
		return 0, false, nil
	}
	if daemonlink.RelativeTLSFiles(env) {
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
	name, err := daemonlink.Socket(root, exe)
	if err != nil {
		return 0, false, nil
	}
	timeout, err := lockTimeout(c)
	if err != nil {
		return 0, false, err
	}
	// A claim for a reader that has gone is not made (claim_reader.go).
	if f, isFile := out.stdoutFile(); isFile && c.Command.Name == "claim" && noReader(f) {
		return 0, false, readerGoneError{}
	}
	code, ok, err = askDaemon(c, name, exe, daemonlink.Request{Args: out.args, Env: env, Root: root, Timeout: timeout})
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
// no daemon of this user said it was ready within daemonlink.Wait, or the
// daemon declined; and after a lost answer to a step that changes nothing
// twice (daemonlink.Retries).
func askDaemon(c *cli.Context, name, exe string, req daemonlink.Request) (code int, ok bool, err error) {
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
	_ = conn.SetReadDeadline(time.Now().Add(daemonlink.HelloWithin(req.Timeout)))
	var hello daemonlink.Reply
	if err := dec.Decode(&hello); err != nil || !hello.Ready {
		return 0, false, nil
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return 0, false, nil // not sent whole: the daemon runs no half request
	}
	// The step is bounded by --timeout (and claim's --wait) in the daemon
	// as in its own process; a daemon that hangs past a generous bound is
	// given up on, as one that died.
	_ = conn.SetReadDeadline(time.Now().Add(answerWithin(c, req.Timeout)))
	// A waiting claim whose reader leaves hangs up: the daemon cancels a
	// step whose client has gone, and nothing is claimed for nobody.
	left := watchReaderWhileWaiting(c, out, conn)
	var reply daemonlink.Reply
	err = dec.Decode(&reply)
	if left() && err != nil { // an answer that came is a claim made: print it
		return 0, false, fmt.Errorf("%w (stopped waiting)", readerGoneError{})
	}
	if err != nil {
		if daemonlink.Retries[c.Command.Name] {
			return 0, false, nil
		}
		return 0, false, errors.New(daemonlink.LostError(req.Root, c.Command.Name, err))
	}
	if reply.Decline != "" {
		return 0, false, nil
	}
	_, werr := out.stdout.Write(reply.Stdout)
	out.stderr.Write(reply.Stderr)
	if werr != nil && reply.Undo != "" {
		// Nobody can read these claims' tokens: this command releases
		// them, in this process (or fencectl-etcd's), and says why.
		_ = os.Setenv("FENCE_DAEMON", "off")
		_ = os.Setenv(daemonlink.UndeliveredVar, strings.ReplaceAll(werr.Error(), "\n", " ")+"\n"+reply.Undo)
		return 0, false, nil
	}
	if werr != nil && reply.Code == 0 {
		return 0, false, errors.New(daemonlink.AnswerLostError(c.Command.Name, werr, reply.Stdout))
	}
	return reply.Code, true, nil
}

// answerWithin is how long a client waits for the daemon's answer:
// three times --timeout (10 s if 0) and claim's --wait, plus 30 s.
func answerWithin(c *cli.Context, timeout time.Duration) time.Duration {
	wait := time.Duration(0)
	if c.Command.Name == "claim" {
		wait = c.Duration("wait")
	}
	return daemonlink.AnswerWithin(timeout, wait)
}

// checkDaemonVar refuses a FENCE_DAEMON that is none of its values.
func checkDaemonVar() error {
	switch v := os.Getenv("FENCE_DAEMON"); v {
	case "", "on", "off", daemonExisting:
		return nil
	default:
		return usagef("invalid FENCE_DAEMON=%q: on (the default: an agent's steps go to the host's daemon for the tree), existing (to a daemon that runs already, never one started for them: run sets it for its command) or off (each command in its own process); fix or unset it", v)
	}
}

// daemonExisting is daemonlink.Existing: use a daemon, never start one.
const daemonExisting = daemonlink.Existing

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

// dialDaemon connects to the daemon at name, starting exe as one for
// root when none listens, and waits up to daemonlink.Wait for it.
func dialDaemon(name, exe, root string) (*net.UnixConn, error) {
	addr := &net.UnixAddr{Name: name, Net: "unix"}
	conn, err := net.DialUnix("unix", nil, addr)
	if err == nil {
		return conn, nil
	}
	if os.Getenv("FENCE_DAEMON") == daemonExisting || !daemonlink.CanStartDaemon() {
		return nil, err
	}
	if err := startDaemon(exe, root); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(daemonlink.Wait)
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
	cmd.Env = handoffEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}
