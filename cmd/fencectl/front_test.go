package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/fencectl/fencectl/cmd/internal/daemonlink"
)

// The front (cmd/front) is what users run as fencectl: it sends an
// agent's steps to the tree's daemon and hands everything else to
// fencectl-full. The scripts run through it too (scriptBackends, "front");
// these tests are about what only the front does.

// frontTree is a bbolt tree with tasks t1…tN, driven through bin.
type frontTree struct {
	t   *testing.T
	dir string
	bin clitest.Binary
}

func newFrontTree(t *testing.T, bin clitest.Binary, tasks int) *frontTree {
	t.Helper()
	ft := &frontTree{t: t, dir: filepath.Join(t.TempDir(), "tree"), bin: bin}
	t.Cleanup(func() { stopDaemons(ft.dir) })
	ft.ok("init")
	for i := 1; i <= tasks; i++ {
		ft.ok("add", "--id", "t"+strconv.Itoa(i))
	}
	return ft
}

// run runs fencectl args on the tree, with env, and returns its exit
// code and output.
func (ft *frontTree) run(env []string, args ...string) (int, string, string) {
	c := ft.bin.Command(ft.dir, args...)
	c.Env = append(c.Env, env...)
	var stdout, stderr strings.Builder
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	return clitest.ExitCode(err), stdout.String(), stderr.String()
}

func (ft *frontTree) ok(args ...string) string {
	ft.t.Helper()
	code, stdout, stderr := ft.run(nil, args...)
	if code != 0 {
		ft.t.Fatalf("%v: exit %d\n%s%s", args, code, stdout, stderr)
	}
	return stdout
}

// holder is the agent holding task id, or "" if nobody does.
func (ft *frontTree) holder(id string) string {
	ft.t.Helper()
	var show struct {
		Lease *struct {
			Agent string `json:"agent"`
			Token uint64 `json:"token"`
		} `json:"lease"`
	}
	if err := json.Unmarshal([]byte(ft.ok("show", id, "--json")), &show); err != nil {
		ft.t.Fatal(err)
	}
	if show.Lease == nil {
		return ""
	}
	return show.Lease.Agent
}

// TestFront_SameAnswersAsOwnProcess runs each of an agent's steps on two
// bbolt trees, through the front (so in the tree's daemon) and in
// fencectl-full's own process, and compares exit codes and output,
// every refusal included; then it checks that the front's steps did go
// to a daemon, and the others to none.
func TestFront_SameAnswersAsOwnProcess(t *testing.T) {
	trees := map[string]*frontTree{
		"front": newFrontTree(t, clitest.Binary{Path: filepath.Join(frontDir(t), "fencectl")}, 3),
		"own":   newFrontTree(t, fencectlBin, 3),
	}
	clean := func(ft *frontTree, s string) string {
		s = strings.ReplaceAll(s, ft.dir, "TREE")
		s = regexp.MustCompile(`\b\d{13,20}\b`).ReplaceAllString(s, "TOKEN")
		return regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+Z`).ReplaceAllString(s, "TIME")
	}
	tokens := map[string]map[string]string{"front": {}, "own": {}}
	// step runs args on both trees, TOKEN:ID standing for each tree's own
	// token of task ID, and returns the front's exit code.
	step := func(args ...string) int {
		t.Helper()
		type answer struct {
			code           int
			stdout, stderr string
		}
		got := map[string]answer{}
		for name, ft := range trees {
			own := make([]string, len(args))
			for i, a := range args {
				if id, ok := strings.CutPrefix(a, "TOKEN:"); ok {
					a = tokens[name][id]
				}
				own[i] = a
			}
			code, stdout, stderr := ft.run(nil, own...)
			if own[0] == "claim" && code == 0 && strings.Contains(strings.Join(own, " "), "--json") {
				var c struct {
					Task  string `json:"task"`
					Token uint64 `json:"token"`
				}
				if err := json.Unmarshal([]byte(stdout), &c); err != nil {
					t.Fatalf("%v: %v\n%s", own, err, stdout)
				}
				tokens[name][c.Task] = strconv.FormatUint(c.Token, 10)
			}
			got[name] = answer{code, clean(ft, stdout), clean(ft, stderr)}
		}
		if got["front"] != got["own"] {
			t.Errorf("%v: through the front %+v, in its own process %+v", args, got["front"], got["own"])
		}
		return got["front"].code
	}
	for _, s := range []struct {
		args []string
		code int
	}{
		{[]string{"claim", "t1", "--agent", "a1", "--json"}, 0},
		{[]string{"claim", "t1", "--agent", "a2"}, exitNotAvailable},
		{[]string{"heartbeat", "t1", "--token", "1"}, 3},
		{[]string{"--json", "heartbeat", "t1", "--token", "1"}, 3},
		{[]string{"heartbeat", "t1", "--token", "TOKEN:t1"}, 0},
		{[]string{"verify", "t1", "--token", "TOKEN:t1", "--json"}, 0},
		{[]string{"complete", "t9", "--token", "5"}, 6},
		{[]string{"complete", "t1", "--token", "7", "--json"}, 3},
		{[]string{"claim", "--agent", "bad\x01name"}, 2},
		{[]string{"claim", "--agent", "bad\xffname"}, 2},
		{[]string{"claim", "--bogus"}, 2},
		{[]string{"claim", "t2", "--agent", "a1", "--json"}, 0},
		{[]string{"release", "t2", "--token", "TOKEN:t2", "--reason", "later"}, 0},
		{[]string{"claim", "t2", "--agent", "a1", "--json"}, 0},
		{[]string{"fail", "t2", "--token", "TOKEN:t2", "--reason", "boom", "--json"}, 0},
		{[]string{"complete", "t1", "--token", "TOKEN:t1"}, 0},
		{[]string{"complete", "t1", "--token", "TOKEN:t1"}, 0}, // again: a retry after a lost answer
		{[]string{"claim", "--agent", "a1", "--format", "env"}, 0},
		{[]string{"claim", "--agent", "a1", "--json"}, exitNotAvailable},
	} {
		if code := step(s.args...); code != s.code {
			t.Errorf("%v exited %d, want %d", s.args, code, s.code)
		}
	}
	if pids := daemonPids(trees["front"].dir); len(pids) != 1 {
		t.Errorf("the front's tree has %d daemons, want the one its first step started", len(pids))
	}
	if pids := daemonPids(trees["own"].dir); len(pids) != 0 {
		t.Errorf("fencectl-full started %d daemons for a bbolt tree: its own process commits", len(pids))
	}
}

// TestFront_RunsTheCommandOnTheTreeItNames gives the front a command
// line it reads wrong: `claim --agent --dir=B` is a claim on the tree of
// FENCE_DIR by an agent named "--dir=B", which the front takes for a
// claim on B and sends to B's daemon. The daemon reads the command line
// as fencectl does and declines it, and the front runs it in its own
// process: on the tree the command line names, never on B.
func TestFront_RunsTheCommandOnTheTreeItNames(t *testing.T) {
	front := clitest.Binary{Path: filepath.Join(frontDir(t), "fencectl")}
	a, b := newFrontTree(t, front, 1), newFrontTree(t, front, 1)
	// B's daemon is up: a step on B started it (a refused one).
	if code, _, _ := b.run(nil, "verify", "t1", "--token", "1"); code != 3 {
		t.Fatalf("verify with no lease: exit %d, want 3", code)
	}
	if len(daemonPids(b.dir)) != 1 {
		t.Fatal("no daemon for B")
	}
	code, stdout, stderr := a.run(nil, "claim", "--agent", "--dir="+b.dir)
	if code != 0 {
		t.Fatalf("claim: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := a.holder("t1"); got != "--dir="+b.dir {
		t.Errorf("A's task is held by %q, want the agent the command line named", got)
	}
	if got := b.holder("t1"); got != "" {
		t.Errorf("B's task was claimed by %q: the daemon ran a command on a tree its command line does not name", got)
	}
}

// TestFront_DaemonKilledMidStep kills the daemon while it runs a step
// (blocked on the tree's lock, held here): a claim may or may not have
// happened, so the front reports that and runs nothing again (the task
// stays available once the lock is free); a heartbeat changes nothing
// twice, so the front runs it again in its own process, and it succeeds.
func TestFront_DaemonKilledMidStep(t *testing.T) {
	ft := newFrontTree(t, clitest.Binary{Path: filepath.Join(frontDir(t), "fencectl")}, 2)
	tok := "" // the claim starts the daemon
	{
		var c struct {
			Token uint64 `json:"token"`
		}
		if err := json.Unmarshal([]byte(ft.ok("claim", "t2", "--agent", "a", "--json")), &c); err != nil {
			t.Fatal(err)
		}
		tok = strconv.FormatUint(c.Token, 10)
	}
	for _, s := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"claim", "t1", "--agent", "a"}, 1, "did not answer"},
		{[]string{"heartbeat", "t2", "--token", tok}, 0, ""},
	} {
		pids := daemonPids(ft.dir)
		if len(pids) != 1 {
			t.Fatalf("%d daemons for the tree, want 1", len(pids))
		}
		unlock := holdTreeLock(t, ft.dir)
		c := ft.bin.Command(ft.dir, s.args...)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		waitBlockedInFlock(t, pids[0])
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		unlock()
		err := c.Wait()
		if code := clitest.ExitCode(err); code != s.code || !strings.Contains(stderr.String(), s.want) {
			t.Errorf("%v with its daemon killed: exit %d, want %d with %q\n%s%s", s.args, code, s.code, s.want, &stdout, &stderr)
		}
		for len(daemonPids(ft.dir)) > 0 {
			time.Sleep(10 * time.Millisecond) // the killed daemon's pid leaving /proc
		}
		ft.ok("verify", "t2", "--token", tok) // and a new daemon for the next round
	}
	if got := ft.holder("t1"); got != "" {
		t.Errorf("t1 is held by %q: a claim whose answer was lost ran again", got)
	}
}

// holdTreeLock takes the tree's writer lock, as another writer would,
// until the returned func is called.
func holdTreeLock(t *testing.T, dir string) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, ".fence", "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { f.Close() }
}

// waitBlockedInFlock waits until a thread of pid waits in flock(2): the
// daemon has the step, and waits for the lock.
func waitBlockedInFlock(t *testing.T, pid int) {
	t.Helper()
	flock := strconv.Itoa(unix.SYS_FLOCK) + " "
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/syscall")
		for _, p := range tasks {
			if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), flock) {
				return
			}
		}
		time.Sleep(5 * time.Millisecond) // polling another process's state
	}
	t.Fatalf("the daemon (pid %d) never waited for the tree's lock", pid)
}

// TestFront_WithoutFull runs the front alone: every command it cannot
// send says where fencectl-full was looked for, and exits 1.
func TestFront_WithoutFull(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(frontDir(t), "fencectl")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	alone := filepath.Join(dir, "fencectl")
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(alone, "status")
	c.Env = append(os.Environ(), "PATH="+dir)
	out, err := c.CombinedOutput()
	if code := clitest.ExitCode(err); code != 1 || !strings.Contains(string(out), "fencectl-full is not beside this fencectl") {
		t.Errorf("status without fencectl-full: exit %d\n%s", code, out)
	}
}

// TestFront_StoppedDaemon stops the daemon (SIGSTOP): the kernel still
// accepts connections for it, but it never says it is ready, so the
// front sends nothing and runs each step in its own process; once the
// daemon goes on, it has nothing of theirs to run again.
func TestFront_StoppedDaemon(t *testing.T) {
	ft := newFrontTree(t, clitest.Binary{Path: filepath.Join(frontDir(t), "fencectl")}, 2)
	var c struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(ft.ok("claim", "t1", "--json")), &c); err != nil {
		t.Fatal(err)
	}
	pids := daemonPids(ft.dir)
	if len(pids) != 1 {
		t.Fatalf("%d daemons for the tree, want 1", len(pids))
	}
	if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pids[0], syscall.SIGCONT)
	start := time.Now()
	ft.ok("complete", "t1", "--token", strconv.FormatUint(c.Token, 10))
	ft.ok("claim", "t2", "--agent", "b")
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("two steps beside a stopped daemon took %s", took)
	}
	_ = syscall.Kill(pids[0], syscall.SIGCONT)
	time.Sleep(300 * time.Millisecond) // the daemon going on with whatever it had
	show := ft.ok("show", "t2", "--json")
	if !strings.Contains(show, `"agent":"b"`) || strings.Count(show, `"type":"claim"`) != 1 {
		t.Fatalf("t2 after the daemon went on:\n%s", show)
	}
	ft.ok("replay", "--check")
}

// TestFront_RequestTooLongForTheDaemon sends a step whose FENCE_*
// variables make a request longer than a daemon reads (1 MiB): the front
// runs it in its own process, where it succeeds, and the daemon lives on.
// Then a request the daemon cannot read, sent by hand: it runs nothing
// and declines, so that a client still there runs the step itself (hung
// up on, it would have to report that the step may have happened).
func TestFront_RequestTooLongForTheDaemon(t *testing.T) {
	ft := newFrontTree(t, clitest.Binary{Path: filepath.Join(frontDir(t), "fencectl")}, 1)
	if code, _, _ := ft.run(nil, "verify", "t1", "--token", "1"); code != 3 { // starts the daemon
		t.Fatalf("verify with no lease: exit %d, want 3", code)
	}
	var env []string
	pad := strings.Repeat("x", 120<<10) // under the kernel's 128 KiB for one variable
	for i := 0; i < 10; i++ {
		env = append(env, fmt.Sprintf("FENCE_PAD_%d=%s", i, pad))
	}
	code, stdout, stderr := ft.run(env, "claim", "t1", "--agent", "long")
	if code != 0 {
		t.Fatalf("claim with 1.2 MB of FENCE_* variables: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := ft.holder("t1"); got != "long" {
		t.Errorf("t1 is held by %q, want long", got)
	}
	if len(daemonPids(ft.dir)) != 1 {
		t.Errorf("the daemon is gone after a request too long")
	}
	name := daemonSocket(t, ft.dir)
	conn, err := net.Dial("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if ready, err := r.ReadString('\n'); err != nil || !strings.Contains(ready, `"ready":true`) {
		t.Fatalf("the daemon's first line: %q, %v", ready, err)
	}
	if _, err := conn.Write([]byte("{not a request\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := r.ReadString('\n')
	if err != nil || !strings.Contains(reply, `"decline":"request unreadable`) {
		t.Errorf("the daemon's answer to a request it cannot read: %q, %v; want a decline", reply, err)
	}
}

// TestFront_DaemonThatCannotStart gives the front a fencectl-full whose
// daemon exits at once (as one that cannot listen would): the front stops
// waiting for it when it has exited, and hands the step on at once,
// rather than after the 2 s it gives a daemon to come up.
func TestFront_DaemonThatCannotStart(t *testing.T) {
	tree := newFrontTree(t, fencectlBin, 1)
	dir := t.TempDir()
	front, err := os.ReadFile(filepath.Join(frontDir(t), "fencectl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fencectl"), front, 0o755); err != nil {
		t.Fatal(err)
	}
	full := "#!/bin/sh\nif [ \"$1\" = daemon ]; then exit 1; fi\necho \"handed on: $*\"\n"
	if err := os.WriteFile(filepath.Join(dir, "fencectl-full"), []byte(full), 0o755); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(filepath.Join(dir, "fencectl"), "claim", "t1")
	c.Env = append(os.Environ(), "FENCE_DIR="+tree.dir)
	start := time.Now()
	out, err := c.CombinedOutput()
	took := time.Since(start)
	if err != nil || string(out) != "handed on: claim t1\n" {
		t.Fatalf("claim: %v\n%s", err, out)
	}
	// Not a speed goal: the bound is the 2 s wait this test is about.
	if took > 1500*time.Millisecond {
		t.Errorf("the front waited %s for a daemon that had exited", took)
	}
}

// TestFront_StoppedDaemonWithFullQueue stops the daemon and fills its
// queue of connections (what thousands of steps tried against a stopped
// daemon leave behind): the front's connect fails at once and the step
// runs in its own process, instead of waiting in connect(2) for good.
func TestFront_StoppedDaemonWithFullQueue(t *testing.T) {
	ft := newFrontTree(t, clitest.Binary{Path: filepath.Join(frontDir(t), "fencectl")}, 1)
	var c struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(ft.ok("claim", "t1", "--json")), &c); err != nil {
		t.Fatal(err)
	}
	pids := daemonPids(ft.dir)
	if len(pids) != 1 {
		t.Fatalf("%d daemons for the tree, want 1", len(pids))
	}
	if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pids[0], syscall.SIGCONT)
	name := daemonSocket(t, ft.dir)
	full := false
	for i := 0; i < 1<<17 && !full; i++ {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: name})
		unix.Close(fd)
		switch {
		case err == unix.EAGAIN:
			full = true
		case err != nil:
			t.Fatalf("connect %d to the stopped daemon: %v", i, err)
		}
	}
	if !full {
		t.Fatal("the stopped daemon's queue never filled")
	}
	step := ft.bin.Command(ft.dir, "verify", "t1", "--token", strconv.FormatUint(c.Token, 10))
	var out strings.Builder
	step.Stdout, step.Stderr = &out, &out
	if err := step.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- step.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("verify beside a stopped daemon with a full queue: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		_ = step.Process.Kill()
		t.Fatalf("verify beside a stopped daemon with a full queue still waits after 60 s\n%s", out.String())
	}
}

// TestFront_GoneCallerStepNotMade: a client sends a claim, the daemon
// waits for the tree's lock, is stopped (SIGSTOP: a frozen cgroup, a
// starved host), and the client gives up and hangs up meanwhile. When
// the daemon runs again it must not make the claim: nobody would get its
// token, and the task would be held by nobody until its lease ran out.
func TestFront_GoneCallerStepNotMade(t *testing.T) {
	ft := newFrontTree(t, clitest.Binary{Path: filepath.Join(frontDir(t), "fencectl")}, 2)
	ft.ok("claim", "t1", "--agent", "a") // starts the daemon
	pids := daemonPids(ft.dir)
	if len(pids) != 1 {
		t.Fatalf("%d daemons for the tree, want 1", len(pids))
	}
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		t.Fatal(err)
	}
	name, err := daemonlink.Socket(ft.dir, self)
	if err != nil {
		t.Fatal(err)
	}
	unlock := holdTreeLock(t, ft.dir)
	defer unlock()
	conn, err := net.Dial("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if hello, err := r.ReadString('\n'); err != nil || !strings.Contains(hello, `"ready":true`) {
		t.Fatalf("daemon's first line: %q, %v", hello, err)
	}
	cwd, _ := os.Getwd()
	req := daemonlink.AppendRequest(nil, daemonlink.Request{Args: []string{"fencectl", "--dir", ft.dir, "claim", "t2", "--agent", "ghost"},
		Env: map[string]string{}, Root: ft.dir, Cwd: cwd, Timeout: 10 * time.Second})
	if _, err := conn.Write(append(req, '\n')); err != nil {
		t.Fatal(err)
	}
	waitBlockedInFlock(t, pids[0])
	if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	conn.Close() // the client gives up
	unlock()
	if err := syscall.Kill(pids[0], syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// A write through the daemon queues behind the ghost's group: once
	// it is answered, that group has run.
	if code, out, errOut := ft.run(nil, "heartbeat", "t1", "--token", "1"); code != 3 {
		t.Fatalf("heartbeat with a token never issued: exit %d, want 3\n%s%s", code, out, errOut)
	}
	if got := ft.holder("t2"); got != "" {
		t.Errorf("t2 is held by %q: the daemon made the claim of a client that had gone", got)
	}
	ft.ok("replay", "--check")
}

// daemonSocket is the socket of the daemon the front starts for the tree
// at dir: fencectl-full's beside it, which is this test binary.
func daemonSocket(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		t.Fatal(err)
	}
	name, err := daemonlink.Socket(dir, self)
	if err != nil {
		t.Fatal(err)
	}
	return name
}
