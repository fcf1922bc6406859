package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/fencectl/fencectl/cmd/internal/daemonlink"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
)

// daemonTree is an etcd tree with tasks t1…tN, driven through real
// processes of this binary; env may switch the daemon off.
type daemonTree struct {
	t   *testing.T
	dir string
	env []string
}

var daemonTrees atomic.Int64

func newDaemonTree(t *testing.T, endpoints string, tasks int) *daemonTree {
	t.Helper()
	dt := &daemonTree{t: t, dir: filepath.Join(t.TempDir(), "tree")}
	if err := os.MkdirAll(dt.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemons(dt.dir) })
	dt.ok(dt.cmd("init", "--journal", fmt.Sprintf("etcd://%s/daemon-%d", endpoints, daemonTrees.Add(1))))
	for i := 1; i <= tasks; i++ {
		dt.ok(dt.cmd("add", "--id", fmt.Sprintf("t%d", i)))
	}
	return dt
}

func (dt *daemonTree) cmd(args ...string) *exec.Cmd {
	c := fencectlCmd(dt.dir, args...)
	c.Env = append(c.Env, dt.env...)
	return c
}

// run runs c and returns its exit code, stdout and stderr.
func (dt *daemonTree) run(c *exec.Cmd) (int, string, string) {
	var stdout, stderr strings.Builder
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	return clitest.ExitCode(err), stdout.String(), stderr.String()
}

func (dt *daemonTree) ok(c *exec.Cmd) string {
	dt.t.Helper()
	code, stdout, stderr := dt.run(c)
	if code != 0 {
		dt.t.Fatalf("%v: exit %d\n%s%s", c.Args, code, stdout, stderr)
	}
	return stdout
}

// daemonPids are the processes running `fencectl daemon --dir dir`.
func daemonPids(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	want := "daemon\x00--dir\x00" + dir + "\x00"
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func stopDaemons(dir string) {
	for _, pid := range daemonPids(dir) {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	}
}

// TestDaemon_SameAnswersAsOwnProcess runs each of an agent's steps on an
// etcd tree twice, through the daemon and in its own process
// (FENCE_DAEMON=off), and compares exit codes and output, refusals
// included; the first step started a daemon for the tree.
func TestDaemon_SameAnswersAsOwnProcess(t *testing.T) {
	endpoints := clitest.Etcd(t)
	trees := map[string]*daemonTree{"on": newDaemonTree(t, endpoints, 3), "off": newDaemonTree(t, endpoints, 3)}
	trees["off"].env = []string{"FENCE_DAEMON=off"}
	type answer struct {
		code           int
		stdout, stderr string
	}
	step := func(args ...string) map[string]answer {
		got := map[string]answer{}
		for mode, dt := range trees {
			code, stdout, stderr := dt.run(dt.cmd(args...))
			// What differs between two trees: their paths and tokens.
			clean := func(s string) string {
				s = strings.ReplaceAll(s, dt.dir, "TREE")
				s = regexp.MustCompile(`\b\d{13,20}\b`).ReplaceAllString(s, "TOKEN")
				return regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+Z`).ReplaceAllString(s, "TIME")
			}
			got[mode] = answer{code, clean(stdout), clean(stderr)}
		}
		if got["on"] != got["off"] {
			t.Errorf("%v: through the daemon %+v, in its own process %+v", args, got["on"], got["off"])
		}
		return got
	}
	token := func(dt *daemonTree, id string) string {
		var show struct {
			Lease struct {
				Token uint64 `json:"token"`
			} `json:"lease"`
		}
		if err := json.Unmarshal([]byte(dt.ok(dt.cmd("show", id, "--json"))), &show); err != nil {
			t.Fatal(err)
		}
		return strconv.FormatUint(show.Lease.Token, 10)
	}
	if c := step("claim", "t1", "--agent", "a1", "--json")["on"]; c.code != 0 {
		t.Fatalf("claim: %+v", c)
	}
	if len(daemonPids(trees["on"].dir)) != 1 || len(daemonPids(trees["off"].dir)) != 0 {
		t.Fatalf("daemons: %v for the tree with them on, %v with them off; want one and none", daemonPids(trees["on"].dir), daemonPids(trees["off"].dir))
	}
	for want, args := range map[int][]string{
		3: {"complete", "t1", "--token", "12345"},
		6: {"verify", "nope", "--token", "12345"},
		2: {"heartbeat", "t1"},
	} {
		if got := step(args...)["on"].code; got != want {
			t.Errorf("%v: exit %d, want %d", args, got, want)
		}
	}
	// Steps with the real token, on each tree its own.
	for _, args := range [][]string{{"verify", "t1"}, {"heartbeat", "t1", "--json"}, {"release", "t1", "--json"}} {
		for mode, dt := range trees {
			code, _, stderr := dt.run(dt.cmd(append(args, "--token", token(dt, "t1"))...))
			if code != 0 {
				t.Errorf("%s %v: exit %d: %s", mode, args, code, stderr)
			}
		}
	}
	step("claim", "--agent", "a2", "--batch", "3", "--json")
	if got := step("claim", "--agent", "a3")["on"].code; got != 4 {
		t.Errorf("claim with nothing ready: exit %d, want 4", got)
	}
}

// TestDaemon_ClientGoneCancelsItsCommand interrupts a claim --wait that
// the daemon runs: its own process would have ended with it, so a task
// added later must stay available.
func TestDaemon_ClientGoneCancelsItsCommand(t *testing.T) {
	dt := newDaemonTree(t, clitest.Etcd(t), 0)
	waiting := dt.cmd("claim", "--agent", "gone", "--wait", "30s")
	if err := waiting.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(daemonPids(dt.dir)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the claim is waiting in the daemon
	_ = waiting.Process.Kill()
	_ = waiting.Wait()
	time.Sleep(100 * time.Millisecond)
	dt.ok(dt.cmd("add", "--id", "late"))
	time.Sleep(500 * time.Millisecond)
	if out := dt.ok(dt.cmd("show", "late", "--json")); !strings.Contains(out, `"state":"available"`) {
		t.Fatalf("a claim whose caller was killed took the task added after:\n%s", out)
	}
}

// TestDaemon_KilledDaemon kills the daemon while it runs a command and
// between commands: the command it ran exits 1 saying the step may have
// happened (never running it again in its own process, which could
// claim a second task), and the next command starts another daemon.
func TestDaemon_KilledDaemon(t *testing.T) {
	dt := newDaemonTree(t, clitest.Etcd(t), 1)
	dt.ok(dt.cmd("claim", "t1", "--agent", "a"))
	first := daemonPids(dt.dir)
	if len(first) != 1 {
		t.Fatalf("daemons after a claim: %v, want one", first)
	}
	waiting := dt.cmd("claim", "--agent", "b", "--wait", "30s")
	var stderr strings.Builder
	waiting.Stderr = &stderr
	if err := waiting.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the claim is waiting in the daemon
	stopDaemons(dt.dir)
	done := make(chan error, 1)
	go func() { done <- waiting.Wait() }()
	select {
	case err := <-done:
		if code := clitest.ExitCode(err); code != 1 || !strings.Contains(stderr.String(), "did not answer") {
			t.Fatalf("claim whose daemon was killed: exit %d, %q; want exit 1 saying the daemon did not answer", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		_ = waiting.Process.Kill()
		t.Fatal("claim whose daemon was killed did not end")
	}
	dt.ok(dt.cmd("add", "--id", "t2"))
	out := dt.ok(dt.cmd("claim", "--agent", "c"))
	if !strings.Contains(out, "t2") {
		t.Fatalf("claim after the daemon was killed: %s", out)
	}
	second := daemonPids(dt.dir)
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("daemons after the kill: %v (the killed one was %v), want one new one", second, first)
	}
}

// TestDaemon_StepsFromManyProcesses races 8 processes that claim and
// complete through one daemon: every task done exactly once, and the
// daemon really served them (it committed in groups: fewer commits than
// steps is not asserted, as timing decides it).
func TestDaemon_StepsFromManyProcesses(t *testing.T) {
	const tasks, workers = 48, 8
	dt := newDaemonTree(t, clitest.Etcd(t), tasks)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for {
				code, stdout, stderr := dt.run(dt.cmd("claim", "--agent", fmt.Sprintf("w%d", w), "--json"))
				if code == 4 {
					return
				}
				if code != 0 {
					errs <- fmt.Errorf("claim: exit %d: %s", code, stderr)
					return
				}
				var c struct {
					Task  string `json:"task"`
					Token uint64 `json:"token"`
				}
				if err := json.Unmarshal([]byte(stdout), &c); err != nil {
					errs <- err
					return
				}
				if code, _, stderr := dt.run(dt.cmd("complete", c.Task, "--token", strconv.FormatUint(c.Token, 10))); code != 0 {
					errs <- fmt.Errorf("complete %s: exit %d: %s", c.Task, code, stderr)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	done, err := os.ReadDir(filepath.Join(dt.dir, "done"))
	if err != nil || len(done) != tasks {
		t.Fatalf("done/ holds %d tasks (%v), want %d", len(done), err, tasks)
	}
	if n := len(daemonPids(dt.dir)); n != 1 {
		t.Fatalf("%d daemons served the tree, want 1", n)
	}
	dt.ok(dt.cmd("replay", "--check"))
}

// impostor runs as another user (TestDaemon_OtherUsers): with
// FENCECTL_IMPOSTOR=@name and FENCECTL_IMPOSTOR_REQUEST set it sends that
// request to the daemon at name and prints the reply; with
// FENCECTL_IMPOSTOR_LOG set it listens at name instead, as a daemon of
// its own would, and writes what the first client sent to that file.
func impostor(name string) {
	addr := &net.UnixAddr{Name: name, Net: "unix"}
	if req := os.Getenv("FENCECTL_IMPOSTOR_REQUEST"); req != "" {
		conn, err := net.DialUnix("unix", nil, addr)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		if req == "flood" { // a request that never ends, 256 MiB of it
			_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprint(conn, `{"args":["`)
			chunk := []byte(strings.Repeat("x", 1<<20))
			sent := 0
			for range 256 {
				if _, err := conn.Write(chunk); err != nil {
					break
				}
				sent++
			}
			fmt.Printf("flooded %d MiB\n", sent)
			os.Exit(0)
		}
		fmt.Fprintln(conn, req)
		reply, _ := io.ReadAll(conn)
		fmt.Printf("reply: %s\n", reply)
		os.Exit(0)
	}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("listening")
	conn, err := ln.Accept()
	if err != nil {
		os.Exit(1)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(conn)
	_ = os.WriteFile(os.Getenv("FENCECTL_IMPOSTOR_LOG"), got, 0o666)
	os.Exit(0)
}

// TestDaemon_OtherUsers puts a process of another user at each end of
// a daemon's socket (abstract: no file mode keeps anyone out): root's
// daemon declines that user's request, and root's command sends nothing
// (its credentials) to that user's listener at its daemon's name, but
// runs in its own process. Needs root, to run as nobody.
func TestDaemon_OtherUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("running a process as another user needs root (CI runs as root)")
	}
	endpoints := clitest.Etcd(t)
	// This test binary, where nobody may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	shared, err := os.MkdirTemp("", "fencectl-impostor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(shared, "impostor")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(env ...string) *exec.Cmd {
		c := exec.Command(bin)
		c.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return c
	}
	exe, err := filepath.EvalSymlinks(self)
	if err != nil {
		t.Fatal(err)
	}

	// Root's daemon, asked by nobody.
	dt := newDaemonTree(t, endpoints, 2)
	dt.ok(dt.cmd("claim", "t1", "--agent", "root"))
	name, err := daemonlink.Socket(dt.dir, exe)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(daemonlink.Request{Args: []string{"fencectl", "claim", "t2", "--agent", "nobody"}, Root: dt.dir, Env: map[string]string{}})
	out, err := asNobody("FENCECTL_IMPOSTOR="+name, "FENCECTL_IMPOSTOR_REQUEST="+string(req)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"decline":"another user"`) {
		t.Fatalf("nobody's request to root's daemon: %v\n%s", err, out)
	}
	if show := dt.ok(dt.cmd("show", "t2", "--json")); !strings.Contains(show, `"state":"available"`) {
		t.Fatalf("root's daemon ran nobody's claim:\n%s", show)
	}
	// Nor does it read what nobody sends: a request that never ends
	// must not fill its memory.
	if out, err := asNobody("FENCECTL_IMPOSTOR="+name, "FENCECTL_IMPOSTOR_REQUEST=flood").CombinedOutput(); err != nil || !strings.Contains(string(out), "flooded") {
		t.Fatalf("nobody's flood: %v\n%s", err, out)
	} else {
		t.Logf("nobody: %s", out)
	}
	rss := residentKB(t, daemonPids(dt.dir)[0])
	t.Logf("root's daemon holds %d kB after nobody's flood", rss)
	if rss > 100<<10 {
		t.Fatalf("root's daemon holds %d kB after nobody sent it 256 MiB", rss)
	}

	// Nobody listening where root's command looks for its daemon.
	other := newDaemonTree(t, endpoints, 1)
	name, err = daemonlink.Socket(other.dir, exe)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(shared, "sent")
	listener := asNobody("FENCECTL_IMPOSTOR="+name, "FENCECTL_IMPOSTOR_LOG="+log)
	stdout, err := listener.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := listener.Start(); err != nil {
		t.Fatal(err)
	}
	defer listener.Process.Kill()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "listening\n" {
		t.Fatalf("nobody's listener: %q", line)
	}
	claim := other.cmd("claim", "--agent", "root")
	claim.Env = append(claim.Env, "FENCE_ETCD_PASSWORD=s3cret")
	if code, stdout, stderr := other.run(claim); code != 0 || !strings.Contains(stdout, "t1") {
		t.Fatalf("root's claim beside nobody's listener: exit %d\n%s%s", code, stdout, stderr)
	}
	exited := make(chan error, 1)
	go func() { exited <- listener.Wait() }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("root's command never connected to nobody's listener: the check above checked nothing")
	}
	sent, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("nobody's listener wrote no log: %v", err)
	}
	if len(sent) > 0 {
		t.Fatalf("root's command sent nobody's listener %q", sent)
	}
}

// TestDaemon_ManyTimeouts gives each step another --timeout: the daemon
// keeps a tree open per value, a few at most, and the steps past that run
// in their own process, with the same answers.
func TestDaemon_ManyTimeouts(t *testing.T) {
	dt := newDaemonTree(t, clitest.Etcd(t), 1)
	out := dt.ok(dt.cmd("claim", "t1", "--json"))
	var c struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatal(err)
	}
	for i := range 2 * maxDaemonTrees {
		verify := dt.cmd("verify", "t1", "--token", strconv.FormatUint(c.Token, 10), "--timeout", fmt.Sprintf("%ds", 20+i))
		if code, stdout, stderr := dt.run(verify); code != 0 || !strings.Contains(stdout, "is current") {
			t.Fatalf("verify with --timeout %ds: exit %d\n%s%s", 20+i, code, stdout, stderr)
		}
		if code, _, _ := dt.run(dt.cmd("verify", "t1", "--token", "7", "--timeout", fmt.Sprintf("%ds", 20+i))); code != 3 {
			t.Fatalf("verify of a stale token with --timeout %ds: exit %d, want 3", 20+i, code)
		}
	}
	// One etcd connection per tree, one listening socket.
	pids := daemonPids(dt.dir)
	if len(pids) != 1 {
		t.Fatalf("daemons: %v, want one", pids)
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pids[0]))
	sockets := 0
	for _, fd := range fds {
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pids[0], fd.Name())); strings.HasPrefix(link, "socket:") {
			sockets++
		}
	}
	t.Logf("the daemon has %d sockets open", sockets)
	if sockets > maxDaemonTrees+1 {
		t.Fatalf("the daemon has %d sockets open after %d --timeout values, want at most %d", sockets, 2*maxDaemonTrees, maxDaemonTrees+1)
	}
}

// residentKB is the resident memory of process pid.
func residentKB(t *testing.T, pid int) int {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestDaemon_KeepsNoCallersDescriptor starts the daemon from a command
// whose caller left a pipe open to it (as `exec 9>lock` or `3>&1` do): the
// daemon must not keep it open, or the pipe's reader waits (and a lock
// stays held) for as long as the daemon runs.
func TestDaemon_KeepsNoCallersDescriptor(t *testing.T) {
	dt := newDaemonTree(t, clitest.Etcd(t), 1)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	claim := dt.cmd("claim", "--agent", "a")
	claim.ExtraFiles = []*os.File{w}
	dt.ok(claim)
	w.Close()
	if len(daemonPids(dt.dir)) != 1 {
		t.Fatal("the claim started no daemon")
	}
	_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read of the caller's pipe after the command ended: %d, %v; want EOF (the daemon holds it open)", n, err)
	}
}

// TestDaemon_StoppedDaemon stops the daemon (SIGSTOP): the kernel still
// accepts connections for it, but it never says it is ready, so each
// step runs in its own process within a couple of seconds, and none is
// left for the daemon to run when it goes on (SIGCONT).
func TestDaemon_StoppedDaemon(t *testing.T) {
	dt := newDaemonTree(t, clitest.Etcd(t), 2)
	out := dt.ok(dt.cmd("claim", "t1", "--json"))
	var c struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatal(err)
	}
	pid := daemonPids(dt.dir)[0]
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	start := time.Now()
	dt.ok(dt.cmd("complete", "t1", "--token", strconv.FormatUint(c.Token, 10)))
	dt.ok(dt.cmd("claim", "t2", "--agent", "b"))
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("two steps beside a stopped daemon took %s", took)
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	time.Sleep(300 * time.Millisecond)
	show := dt.ok(dt.cmd("show", "t2", "--json"))
	if !strings.Contains(show, `"agent":"b"`) || strings.Count(show, `"type":"claim"`) != 1 {
		t.Fatalf("t2 after the daemon went on:\n%s", show)
	}
	dt.ok(dt.cmd("replay", "--check"))
}

// TestDaemon_RelativeTLSFiles keeps a command whose FENCE_ETCD_* names a
// TLS file by a relative path in its own process: the daemon, in /, would
// read another file.
func TestDaemon_RelativeTLSFiles(t *testing.T) {
	dt := newDaemonTree(t, clitest.Etcd(t), 1)
	claim := dt.cmd("claim", "--agent", "a")
	claim.Env = append(claim.Env, "FENCE_ETCD_CACERT=ca.pem")
	claim.Dir = t.TempDir()
	code, _, stderr := dt.run(claim)
	if code != 2 || !strings.Contains(stderr, "FENCE_ETCD_CACERT") {
		t.Fatalf("claim with a relative CA file that is not there: exit %d, %s", code, stderr)
	}
	if pids := daemonPids(dt.dir); len(pids) != 0 {
		t.Fatalf("a daemon started: %v", pids)
	}
}

// TestDaemon_TimeoutsApart stops etcd under a daemon: a step with a new
// long --timeout spends it opening its tree, and must not hold up a step
// with a short one, which exits 5 (unreachable) in about its own timeout.
func TestDaemon_TimeoutsApart(t *testing.T) {
	cluster := etcdtest.Start(t, 1)
	dt := newDaemonTree(t, strings.Join(cluster.Endpoints(), ","), 1)
	dt.ok(dt.cmd("claim", "t1"))
	cluster.Stop()
	long := dt.cmd("verify", "t1", "--token", "1", "--timeout", "30s")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = long.Process.Kill(); _ = long.Wait() }()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	code, _, stderr := dt.run(dt.cmd("verify", "t1", "--token", "1", "--timeout", "2s"))
	if took := time.Since(start); code != 5 || took > 10*time.Second {
		t.Fatalf("verify --timeout 2s beside one of 30s, etcd stopped: exit %d after %s, want 5 after about 2s: %s", code, took, stderr)
	}
}
