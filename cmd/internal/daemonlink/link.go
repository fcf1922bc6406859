// Package daemonlink is what the two sides of fencectl's daemon agree on:
// the socket a tree's daemon listens at, the request a client sends and
// the reply it reads, and which commands a daemon runs.
//
// Two programs are clients: the fencectl front (cmd/front), which is
// what users run and links little else so that it starts as fast as a
// Go program can, and the full command set (cmd/fencectl), which also
// runs the daemon. Both compute the same socket name from the same tree
// and program, so this package links nothing either would rather not
// start with: no net, no CLI library.
package daemonlink

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// protocol names this request and reply format in every socket name: a
// client of another format never reaches a daemon of this one.
const protocol = "fencectl daemon 2"

// Serves are the commands a daemon runs: an agent's steps on a task,
// which read no file and no input of the caller's.
var Serves = map[string]bool{"claim": true, "heartbeat": true, "verify": true, "complete": true, "release": true, "fail": true}

// Retries are the commands that may run again in their own process when
// the daemon ended before answering: they change nothing twice.
var Retries = map[string]bool{"verify": true, "heartbeat": true}

// Wait bounds a client's wait for a daemon to say it is ready, one just
// started included.
const Wait = 2 * time.Second

// minHello is the least a client waits for a running daemon to say it is
// ready: a daemon that answers at all answers in microseconds.
const minHello = 100 * time.Millisecond

// HelloWithin is how long a client whose step is bounded by timeout (its
// --timeout; 0 or less: try once) waits for a daemon to say it is ready:
// Wait, or less under a shorter --timeout, so that a stopped daemon does
// not hold the step past it. A step whose daemon says nothing runs in its
// own process: nothing was sent.
func HelloWithin(timeout time.Duration) time.Duration {
	return min(Wait, max(timeout, minHello))
}

// AnswerWithin is how long a client waits for a daemon's answer to a step
// bounded by timeout (0 or less: the default) and, for a claim, its wait:
// three times the timeout, plus the wait, plus 30 s, for a daemon that
// hangs past a generous bound is given up on as one that died. It
// saturates: a huge --timeout must not wrap round to a deadline in the
// past, which gave up on every step at once while the daemon made it.
func AnswerWithin(timeout, wait time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	d := 30 * time.Second
	for _, part := range []time.Duration{timeout, timeout, timeout, max(wait, 0)} {
		if d > math.MaxInt64-part {
			return math.MaxInt64
		}
		d += part
	}
	return d
}

// DefaultTimeout is fence.DefaultTimeout, which this package does not
// link.
const DefaultTimeout = 10 * time.Second

// Request is what a client sends: one JSON line.
type Request struct {
	Args []string          `json:"args"` // the command line, its program name first
	Env  map[string]string `json:"env"`  // the client's FENCE_* variables
	Root string            `json:"root"` // the tree, absolute: whose daemon the client asked
	// Cwd is the client's working directory, against which the daemon
	// resolves the --dir of Args: a daemon runs a command only on the
	// tree its command line names, whatever Root the client guessed.
	// Empty from a client that read its command line as the daemon does
	// (the full command set).
	Cwd string `json:"cwd,omitempty"`
	// Timeout is the command's --timeout (after FENCE_TIMEOUT): the
	// daemon keeps a tree open per value.
	Timeout time.Duration `json:"timeout"`
}

// Reply is what the daemon answers: a line saying it is ready, then one
// with the command's outcome; each one JSON line.
type Reply struct {
	Ready   bool   `json:"ready,omitempty"`   // the first line: send the request
	Decline string `json:"decline,omitempty"` // why the client must run it itself
	Stdout  []byte `json:"stdout,omitempty"`
	Stderr  []byte `json:"stderr,omitempty"`
	Code    int    `json:"code"`
	// Undo names the claims the answer carries, one "ID TOKEN" per line:
	// a client that cannot write the answer (stdout closed, a full disk)
	// hands them to UndeliveredVar, so that they are released rather than
	// held by tokens nobody read.
	Undo string `json:"undo,omitempty"`
}

// UndeliveredVar carries to the full command set the claims whose answer
// a client could not write: the write's error on the first line, then
// Reply.Undo. The claim command then releases them and reports the error,
// and claims nothing.
const UndeliveredVar = "FENCE_DAEMON_UNDELIVERED"

// Existing is the FENCE_DAEMON of a step that may use a daemon that runs
// but must not start one: `run` sets it for its command, whose
// containment would hold, and end with the task, a daemon started there.
const Existing = "existing"

// ConfigFile is the journal config of a tree whose journal is not the
// default bbolt file (fence.TreeJournal reads it).
const ConfigFile = "journal.json"

// Socket names the abstract unix socket of the daemon for the tree at
// root run by the program exe: one per user, tree, program and journal.
// A new build or a tree made again (init, recover) gets a new daemon, and
// the old one, asked by nobody, leaves when idle.
//
// The journal is named by the file that says where it is: an etcd
// tree's config, whose every rewrite is a new daemon, or else the bbolt
// file, by inode only (its size and time change with every commit).
func Socket(root, exe string) (string, error) {
	prog, err := os.Stat(exe)
	if err != nil {
		return "", err
	}
	fence := filepath.Join(root, ".fence")
	journal, err := os.Lstat(filepath.Join(fence, ConfigFile))
	var size, mtime int64
	if err == nil {
		size, mtime = journal.Size(), journal.ModTime().UnixNano()
	} else if errors.Is(err, os.ErrNotExist) {
		journal, err = os.Lstat(filepath.Join(fence, "journal.db"))
	}
	if err != nil {
		return "", err
	}
	st, ok := journal.Sys().(*syscall.Stat_t)
	if !ok || !journal.Mode().IsRegular() {
		return "", errors.New("no journal file")
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d",
		protocol, os.Getuid(), root, exe, prog.Size(), prog.ModTime().UnixNano(), st.Dev, st.Ino, size, mtime)
	return "@fencectl-" + hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// FenceEnv is this process's FENCE_* variables: the settings a command
// reads from its environment, which the daemon reads from the request.
func FenceEnv() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "FENCE_") {
			env[k] = v
		}
	}
	return env
}

// TestHooksSet reports whether a test hook of the fencetest build is set
// in env: those act on the process they are set in, so the command keeps
// to its own.
func TestHooksSet(env map[string]string) bool {
	for k := range env {
		if strings.HasPrefix(k, "FENCE_TEST_") || strings.HasPrefix(k, "FENCE_CRASH") {
			return true
		}
	}
	return false
}

// RelativeTLSFiles reports whether a FENCE_ETCD_* variable of env names a
// TLS file by a relative path: the daemon runs in /, where it would name
// another file.
func RelativeTLSFiles(env map[string]string) bool {
	for _, k := range []string{"FENCE_ETCD_CACERT", "FENCE_ETCD_CERT", "FENCE_ETCD_KEY"} {
		if v := env[k]; v != "" && !filepath.IsAbs(v) {
			return true
		}
	}
	return false
}

// LostError is a step sent to a daemon that ended before answering: the
// step may or may not have happened, so it must not run again.
func LostError(root, command string, err error) string {
	return fmt.Sprintf("the fencectl daemon for %s did not answer (%v): the %s may or may not have happened; `fencectl show ID` tells (FENCE_DAEMON=off runs every command in its own process)", root, err, command)
}

// LostVar carries LostError from the front to the full command set it
// hands the command to, which reports it as it reports every error
// (--json included) and runs nothing.
const LostVar = "FENCE_DAEMON_LOST"

// AnswerLostError is a step that was done but whose answer could not be
// written to stdout (a full disk behind a redirect): the caller must hear
// that it happened, and what the answer was (an add's generated id), or a
// script that saw exit 0, or only an error, adds the work again (found
// from outside: `add - > /dev/full` exited 0). A claim is undone instead
// (UndeliveredVar).
func AnswerLostError(command string, err error, answer []byte) string {
	const most = 200
	shown := strings.TrimSpace(string(answer[:min(len(answer), most)]))
	if len(answer) > most {
		shown += "…"
	}
	if readOnly[command] {
		return fmt.Sprintf("the %s could not write its answer to stdout (%v)", command, err)
	}
	return fmt.Sprintf("the %s is done, but its answer could not be written to stdout (%v): do not repeat it; the answer was: %q", command, err, shown)
}

// readOnly are the commands that change nothing, or serve a session
// whose steps answer for themselves: a lost answer of theirs is only that.
var readOnly = map[string]bool{"status": true, "list": true, "show": true, "log": true, "verify": true, "defaults": true, "guide": true, "version": true, "help": true, "serve": true, "mcp": true, "daemon": true}
