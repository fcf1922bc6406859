package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Containment: nothing CMD starts may outlive its task. run is a child
// subreaper, so every orphan of CMD's tree (a background child, a setsid
// child, a double-forked daemon) is re-parented to run, not to init, and
// run kills and reaps all of its descendants at the end of every task,
// whatever ended it. When run itself is killed with SIGKILL it can do
// nothing, so the strongest mechanism the machine allows is used:
//
//   - cgroup: CMD starts in a cgroup v2 of its own (clone into cgroup, so
//     not even CMD's first fork escapes); a guard process kills the whole
//     cgroup with cgroup.kill when run's pipe closes.
//   - pidns: CMD is pid 1 of a new PID namespace (with a user namespace
//     when not root) and dies with run (parent-death signal); the kernel
//     then kills everything in the namespace.
//   - pgroup: CMD's process group only, killed by the guard; a setsid
//     child of CMD escapes it when run is killed with SIGKILL.
//
// FENCE_RUN_CONTAINMENT=cgroup|pidns|pgroup forces one (and fails if the
// machine does not allow it).
const (
	containCgroup = "cgroup"
	containPidns  = "pidns"
	containPgroup = "pgroup"
	containEnv    = "FENCE_RUN_CONTAINMENT"
)

// containment is how one run process keeps its commands' processes in.
type containment struct {
	mode     string
	cgroup   string     // cgroup mode: the run's cgroup directory
	task     string     // the current task's cgroup, under cgroup
	taskDir  *os.File   // and a handle on it, for clone into cgroup
	tasks    int        // task cgroups made so far
	userns   bool       // pidns mode: with a user namespace
	guard    *guardProc // nil in pidns mode
	fallback []string   // why stronger mechanisms were not available
	// job is set on a job's view of the containment (run --jobs, see
	// forJob): its tasks run beside other jobs' tasks, so it looks at its
	// own task's cgroup only, never at run's children.
	job int
}

// newContainment picks the strongest containment the machine allows (or
// the one FENCE_RUN_CONTAINMENT names), and starts the guard. hold is
// passed to the guard, which keeps it open until everything is killed:
// the request lock, and the liveness anchor that ties run's claims to a
// live holder (so that a SIGKILLed run's task is not reaped as "holder
// died" before its guard has killed what CMD left). With jobs > 1 (run --jobs) tasks run side
// by side, so only a containment that holds each task apart will do: a
// cgroup per task, or a PID namespace per task. The process group is not
// enough: the orphans of two tasks would both come to run, and nothing
// would tell whose each is.
func newContainment(hold []*os.File, jobs int) (*containment, error) {
	want := os.Getenv(containEnv)
	switch want {
	case "", containCgroup, containPidns, containPgroup:
	default:
		return nil, usagef("invalid %s=%q: use cgroup, pidns or pgroup (or leave it unset for the strongest the machine allows)", containEnv, want)
	}
	if jobs > 1 && want == containPgroup {
		return nil, usagef("--jobs %d needs cgroup or pidns containment, and %s=%s asks for pgroup: use --jobs 1, or unset %s", jobs, containEnv, want, containEnv)
	}
	c := &containment{}
	try := func(mode string, setup func() error) (bool, error) {
		if want != "" && want != mode {
			return false, nil
		}
		c.mode = mode
		err := setup()
		if err == nil {
			return true, nil
		}
		c.close()
		if want != "" {
			return false, fmt.Errorf("run: %s=%s: %w", containEnv, want, err)
		}
		c.fallback = append(c.fallback, mode+": "+err.Error())
		*c = containment{fallback: c.fallback}
		return false, nil
	}
	for _, m := range []struct {
		mode  string
		setup func() error
	}{
		{containCgroup, func() error { return c.setupCgroup(hold) }},
		{containPidns, c.setupPidns},
		{containPgroup, func() error { return c.startGuard("-", hold) }},
	} {
		ok, err := try(m.mode, m.setup)
		if err != nil {
			return c, err
		}
		if ok {
			break
		}
	}
	if jobs > 1 {
		if c.mode == containPgroup {
			c.close()
			return nil, fmt.Errorf("run: --jobs %d needs cgroup or pidns containment to keep each task's processes apart, and this machine allows neither (%s): use --jobs 1, or start several runs", jobs, strings.Join(c.fallback, "; "))
		}
		// No subreaper: the task's cgroup or PID namespace holds its
		// orphans, and run's own children are the jobs' commands, which
		// their own Wait reaps.
		return c, nil
	}
	// Orphans of CMD's tree come to run, not to init: run can find them.
	// Only now: the guard, started before, is no child of run, so that
	// run having no child at all says that CMD left nothing (see killAll).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		c.close()
		return nil, fmt.Errorf("run: become a child subreaper: %w", err)
	}
	return c, nil
}

// setupCgroup makes the run's cgroup under run's own (cgroup v2), checks
// the kernel can start a process in it and kill it (cgroup.kill, Linux
// 5.14), and starts the guard.
func (c *containment) setupCgroup(hold []*os.File) error {
	parent, err := ownCgroup2()
	if err != nil {
		return err
	}
	sweepCgroups(parent)
	dir := filepath.Join(parent, "fencectl-run-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("make a cgroup: %w", err)
	}
	c.cgroup = dir
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		return errors.New("no cgroup.kill (Linux 5.14 or later)")
	}
	if err := c.probe(); err != nil {
		return err
	}
	return c.startGuard(dir, hold)
}

// begin makes the cgroup of the next task (cgroup mode), unless the last
// task's is still there to reuse (see idle). A cgroup that has been
// killed through cgroup.kill may kill what is later cloned into it (seen
// on Linux 6.18): only one never killed is reused, and a fresh one leaves
// nothing of the last task behind.
func (c *containment) begin() error {
	if c.mode != containCgroup || c.task != "" {
		return nil
	}
	c.tasks++
	name := "task-" + strconv.Itoa(c.tasks)
	if c.job > 0 {
		name = "job-" + strconv.Itoa(c.job) + "-" + name
	}
	dir := filepath.Join(c.cgroup, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("make the task's cgroup: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		_ = unix.Rmdir(dir)
		return fmt.Errorf("open the task's cgroup: %w", err)
	}
	c.task, c.taskDir = dir, f
	return nil
}

// idle ends a task whose CMD has been waited for (cgroup mode): a task
// cgroup with no process left in it is kept for the next task, which
// saves making, killing and removing one per task (run --loop); one
// with processes left is killed and removed (end).
func (c *containment) idle() error {
	if c.task == "" {
		return nil
	}
	if n, err := cgroupProcs(c.task); err == nil && n == 0 {
		return nil
	}
	return c.end()
}

// cgroupProcs counts the processes left in the cgroup dir (zombies are
// not listed in cgroup.procs). Plain system calls, not os.ReadFile,
// which also stats the file and adds it to the network poller (a cgroup
// file can be polled): a look is on the path of every task of run
// --loop.
func cgroupProcs(dir string) (int, error) {
	fd, err := unix.Open(filepath.Join(dir, "cgroup.procs"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var buf [4096]byte
	n, inPid := 0, false
	for {
		got, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if got == 0 {
			return n, nil
		}
		for _, b := range buf[:got] {
			digit := b >= '0' && b <= '9'
			if digit && !inPid {
				n++
			}
			inPid = digit
		}
	}
}

// end kills what is left in the task's cgroup and removes it.
func (c *containment) end() error {
	if c.task == "" {
		return nil
	}
	c.taskDir.Close()
	dir := c.task
	c.task, c.taskDir = "", nil
	if !killCgroup(dir, 10*time.Second) {
		return fmt.Errorf("processes in %s did not die within 10s", dir)
	}
	_ = unix.Rmdir(dir)
	return nil
}

// setupPidns checks that the kernel lets run start a process in a new
// PID namespace (CAP_SYS_ADMIN, or unprivileged user namespaces).
func (c *containment) setupPidns() error {
	c.userns = os.Geteuid() != 0
	return c.probe()
}

// probe starts the binary itself (it exits at once) the way CMD will be
// started.
func (c *containment) probe() error {
	if err := c.begin(); err != nil {
		return err
	}
	p := exec.Command("/proc/self/exe")
	p.Env = []string{guardEnv + "=" + guardProbe}
	c.prepare(p)
	err := p.Run()
	if eerr := c.end(); err == nil {
		err = eerr
	}
	if err != nil {
		return fmt.Errorf("cannot start a process that way: %w", err)
	}
	return nil
}

// startGuard starts the guard process for the cgroup dir ("-": none).
// It is started through a short-lived middle process (guardSpawn), so
// that it is not run's child: run, a child subreaper from the moment its
// containment is set up, then has no child at all between tasks unless
// a command left something behind, which one waitid tells it without a
// scan of /proc (see killAll). run learns that the guard has exited from
// the guard's end of a second pipe (guardProc.done), not from wait.
func (c *containment) startGuard(dir string, hold []*os.File) error {
	g := &guardProc{dir: dir, hold: hold}
	if err := g.start(); err != nil {
		return err
	}
	c.guard = g
	return nil
}

// guardProc is the guard of one run, shared by its jobs' views of the
// containment; it is started again if it dies while run goes on
// (watchGuard).
type guardProc struct {
	mu      sync.Mutex
	w       *os.File   // the guard's pipe; closing it (or dying) tells it to kill
	done    *os.File   // reaches EOF when the guard has exited
	pid     int        // spared by killAll should the guard be run's child after all
	dir     string     // its cgroup ("-": none)
	hold    []*os.File // what it keeps open until everything is killed (request lock, liveness anchor)
	pgid    int        // the process group it is to kill (pgroup mode), 0 between tasks
	closing bool       // run is ending it (close)
}

// start starts a guard process for g.dir and makes it g's.
func (g *guardProc) start() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	done, doneW, err := os.Pipe()
	if err != nil {
		w.Close()
		return err
	}
	defer doneW.Close()
	if g.pgid > 0 {
		// Into the pipe before the guard exists: a run killed while it
		// starts the guard (a SIGKILL right after the last one died) must
		// not leave a guard that never heard which group to kill.
		fmt.Fprintf(w, "pgroup %d\n", g.pgid)
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.ExtraFiles = append([]*os.File{r, doneW}, g.hold...)
	cmd.Env = []string{guardEnv + "=" + g.dir, guardSpawnEnv + "=" + strconv.Itoa(len(cmd.ExtraFiles))}
	out, err := cmd.Output()
	pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || perr != nil {
		w.Close()
		done.Close()
		return fmt.Errorf("start the guard: %w", errors.Join(err, perr))
	}
	g.w, g.done, g.pid = w, done, pid
	return nil
}

// guardPid is the guard's pid, 0 if none.
func (c *containment) guardPid() int {
	if c.guard == nil {
		return 0
	}
	c.guard.mu.Lock()
	defer c.guard.mu.Unlock()
	return c.guard.pid
}

// tell sends the guard one line (pgroup mode).
func (g *guardProc) tell(line string, pgid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pgid = pgid
	fmt.Fprintln(g.w, line)
}

// watchGuard starts the guard again whenever it exits while run goes on
// (killed by hand, by the OOM killer): without it, a SIGKILL of run would
// leave CMD's processes running on a task that goes to another agent.
// said tells of each new guard, or of one that could not be started.
func (c *containment) watchGuard(said func(detail string)) {
	g := c.guard
	if g == nil {
		return
	}
	go func() {
		for {
			g.mu.Lock()
			done := g.done
			g.mu.Unlock()
			_, _ = io.Copy(io.Discard, done) // EOF: the guard has exited
			g.mu.Lock()
			if g.closing {
				g.mu.Unlock()
				return
			}
			old, oldW := g.pid, g.w
			err := g.start()
			pid := g.pid
			g.mu.Unlock()
			oldW.Close()
			done.Close()
			if err != nil {
				said(fmt.Sprintf("the guard (pid %d) that kills CMD's processes should run be killed has died, and a new one could not be started (%v): a SIGKILL of run now leaves them running", old, err))
				return
			}
			said(fmt.Sprintf("the guard (pid %d) that kills CMD's processes should run be killed had died; a new one (pid %d) took its place", old, pid))
		}
	}()
}

// ownCgroup2 returns the directory of this process's cgroup v2.
func ownCgroup2() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	path := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return "", errors.New("not in a cgroup v2")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 35 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, fs := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(fs) < 1 || fs[0] != "cgroup2" {
			continue
		}
		root, mnt := fields[3], fields[4]
		rel, ok := strings.CutPrefix(path, root)
		if !ok {
			continue
		}
		return filepath.Join(mnt, rel), nil
	}
	return "", errors.New("no cgroup v2 mounted")
}

// prepare sets up cmd to start inside the containment, in a process group
// of its own, and killed if run dies (parent-death signal).
func (c *containment) prepare(cmd *exec.Cmd) {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	switch c.mode {
	case containCgroup:
		attr.UseCgroupFD, attr.CgroupFD = true, int(c.taskDir.Fd())
	case containPidns:
		attr.Cloneflags = syscall.CLONE_NEWPID
		if c.userns {
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		}
	}
	cmd.SysProcAttr = attr
}

// started tells the guard CMD's process group. In cgroup mode the guard
// kills the whole cgroup, CMD's process group with it, so it is told
// nothing per task: a message wakes the guard, twice a task under run
// --loop.
func (c *containment) started(pgid int) {
	if c.guard != nil && c.mode != containCgroup {
		c.guard.tell(fmt.Sprintf("pgroup %d", pgid), pgid)
	}
}

// killAll kills every process CMD started and reaps them, once CMD itself
// has been waited for: the cgroup or the process group, then every
// descendant of run (orphans come to run, the subreaper). It reports how
// many processes CMD had left alive, and an error if some would not die.
//
// A CMD that leaves nothing behind (the common case) costs one waitid,
// not a scan of /proc (see hasChildren); in a PID namespace not even
// that: the kernel kills the namespace before its first process can be
// waited for, so nothing is left there.
func (c *containment) killAll(pgid int) (int, error) {
	if c.job > 0 {
		return c.killTask(pgid)
	}
	guard, release := c.holdGuard()
	left, err := c.killLeft(pgid, guard)
	release()
	if c.guard != nil && c.mode != containCgroup {
		c.guard.tell("idle", 0)
	}
	return left, err
}

// holdGuard returns the guard's pid (0 if none) and keeps a new guard
// from being started (watchGuard) until release is called. Whatever
// reaps or kills run's children holds it: a guard being started is a
// child of run, its middle process (then the guard, reparented to run,
// the subreaper), and a reap of the middle process made the start fail
// with ECHILD, after which the guard, its pipe closed, killed CMD (found
// under load, as a flake of TestRun_DeadGuardIsReplaced).
func (c *containment) holdGuard() (pid int, release func()) {
	g := c.guard
	if g == nil {
		return 0, func() {}
	}
	g.mu.Lock()
	return g.pid, g.mu.Unlock
}

// killLeft is killAll's work on run's children, with guard (spared: it
// is run's child once it was started again) held still.
func (c *containment) killLeft(pgid, guard int) (int, error) {
	self := os.Getpid()
	spare := map[int]bool{}
	if guard > 0 {
		spare[guard] = true
	}
	var ds []procEntry
	if c.mode != containPidns && hasChildren() {
		ds = descendants(self, spare)
	}
	left := 0
	for _, d := range ds {
		if !d.zombie {
			left++
		}
	}
	var err error
	if c.mode == containCgroup {
		err = c.idle()
	} else if pgid > 1 {
		_ = unix.Kill(-pgid, unix.SIGKILL)
	}
	if err == nil && len(ds) > 0 {
		err = killDescendants(self, spare, 10*time.Second)
	}
	return left, err
}

// forJob returns job k's view of the containment (run --jobs, k from 1):
// its own task cgroups, the run's cgroup and guard shared. Only the run's
// containment is closed; it removes the jobs' cgroups with its own.
func (c *containment) forJob(k int) *containment {
	j := *c
	j.job, j.task, j.taskDir, j.tasks = k, "", nil, 0
	return &j
}

// killTask is killAll for one of several jobs: it kills what is left in
// this task's cgroup (a PID namespace is gone with CMD, its first
// process), and never looks at run's children, which are the other
// jobs' commands. What it kills is re-parented to init, which reaps it.
func (c *containment) killTask(pgid int) (int, error) {
	if c.mode != containCgroup {
		if pgid > 1 {
			_ = unix.Kill(-pgid, unix.SIGKILL)
		}
		return 0, nil
	}
	if c.task == "" {
		return 0, nil
	}
	left, err := cgroupProcs(c.task)
	if err == nil && left == 0 {
		return 0, nil
	}
	return left, c.end()
}

// hasChildren reports whether this process has a child, alive or dead
// and not yet waited for. Once CMD is waited for, run has none unless
// CMD left something: every process CMD started that is still alive, or
// dead and not reaped, is a child of run (the subreaper) or a
// descendant of one. The guard is no child of run (see startGuard).
func hasChildren() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
	return err != unix.ECHILD
}

// close removes the cgroup and ends the guard. Call it after killAll.
func (c *containment) close() {
	_ = c.end()
	if c.cgroup != "" {
		removeCgroup(c.cgroup)
	}
	if g := c.guard; g != nil {
		g.mu.Lock()
		g.closing = true
		w, done := g.w, g.done
		g.mu.Unlock()
		w.Close()
		// The guard has killed what was left and removed the cgroup
		// when it exits, closing its end of done.
		_, _ = io.Copy(io.Discard, done)
		done.Close()
	}
}

// procEntry is what /proc/<pid>/stat says of a process.
type procEntry struct {
	pid, ppid int
	zombie    bool
}

// processes lists every process on the machine (of this PID namespace).
// It reads /proc/<pid>/stat with plain system calls (open, read, close),
// not os.ReadFile, which also stats each file and tries to add it to the
// network poller: a scan is on the path of every task of run --loop.
func processes() []procEntry {
	proc, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(proc)
	var (
		ps         []procEntry
		dents      = make([]byte, 16<<10)
		stat       = make([]byte, 512)
		pidsOfDent []int
	)
	for {
		n, err := unix.ReadDirent(proc, dents)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			break
		}
		pidsOfDent = pidsOfDent[:0]
		for buf := dents[:n]; len(buf) > 0; {
			// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
			reclen := int(buf[16]) | int(buf[17])<<8
			if reclen == 0 || reclen > len(buf) {
				break
			}
			name := buf[19:reclen]
			if i := bytesIndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if pid, ok := atoiBytes(name); ok {
				pidsOfDent = append(pidsOfDent, pid)
			}
			buf = buf[reclen:]
		}
		for _, pid := range pidsOfDent {
			if e, ok := readStat(proc, pid, stat); ok {
				ps = append(ps, e)
			}
		}
	}
	return ps
}

// readStat reads /proc/<pid>/stat through the /proc handle proc.
func readStat(proc, pid int, buf []byte) (procEntry, bool) {
	fd, err := unix.Openat(proc, strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procEntry{}, false
	}
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil || n <= 0 {
		return procEntry{}, false
	}
	// pid (comm) S ppid …: comm may hold spaces and parentheses.
	s := string(buf[:n])
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procEntry{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return procEntry{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return procEntry{pid: pid, ppid: ppid, zombie: f[0] == "Z" || f[0] == "X"}, true
}

func bytesIndexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// atoiBytes parses a decimal pid; ok is false for any other name.
func atoiBytes(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// descendants returns every descendant of root except spare ones and
// theirs, and which of them are root's own children.
func descendants(root int, spare map[int]bool) (all []procEntry) {
	kids := map[int][]procEntry{}
	for _, p := range processes() {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, k := range kids[p] {
			if spare[k.pid] {
				continue
			}
			all = append(all, k)
			queue = append(queue, k.pid)
		}
	}
	return all
}

// killDescendants SIGKILLs every descendant of self (but spare ones) and
// reaps those that are, or become, its children, until none is left or
// bound passes.
func killDescendants(self int, spare map[int]bool, bound time.Duration) error {
	end := time.Now().Add(bound)
	for {
		ds := descendants(self, spare)
		if len(ds) == 0 {
			return nil
		}
		for _, d := range ds {
			if !d.zombie {
				_ = unix.Kill(d.pid, unix.SIGKILL)
			}
			if d.ppid == self {
				_, _ = unix.Wait4(d.pid, nil, unix.WNOHANG, nil)
			}
		}
		if time.Now().After(end) {
			return fmt.Errorf("%d processes started by the command would not die", len(ds))
		}
		time.Sleep(time.Millisecond)
	}
}

// reapOrphans reaps the orphans of CMD's tree that died while CMD runs
// (they were re-parented to run, the subreaper), so that none stays a
// zombie until the task ends. It never waits for spare ones (CMD, the
// guard: their own Wait does). It looks before it scans: waitid with
// WNOWAIT names a child that has exited without reaping it; most often
// there is none (a SIGCHLD of CMD's own children, reaped by CMD) or it is
// CMD itself (pid cmd), whose end is at hand anyway: killAll reaps the
// rest.
func reapOrphans(spare map[int]bool, cmd int) {
	for {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
			return // no children at all
		}
		pid := siginfoPid(&info)
		switch {
		case pid == 0 || pid == cmd:
			return // none has exited, or CMD has
		case spare[pid]:
			reapOrphansScan(spare) // others may be behind it
			return
		}
		if _, err := unix.Wait4(pid, nil, unix.WNOHANG, nil); err != nil {
			return
		}
	}
}

// reapOrphans is the package's reapOrphans for a task whose command is
// cmd, sparing the guard, of which no new one is started meanwhile (see
// holdGuard).
func (c *containment) reapOrphans(cmd int) {
	guard, release := c.holdGuard()
	defer release()
	reapOrphans(map[int]bool{cmd: true, guard: true}, cmd)
}

// siginfoPid is si_pid of a siginfo filled by waitid: an int32 after
// si_signo, si_errno, si_code and the padding of the union (offset 16 on
// 64-bit Linux, 12 on 32-bit).
func siginfoPid(info *unix.Siginfo) int {
	b := (*[128]byte)(unsafe.Pointer(info))
	off := 12
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	return int(*(*int32)(unsafe.Pointer(&b[off])))
}

// reapOrphansScan reaps every zombie child of run but spare ones, found
// by a scan of /proc.
func reapOrphansScan(spare map[int]bool) {
	self := os.Getpid()
	for _, p := range processes() {
		if p.ppid == self && p.zombie && !spare[p.pid] {
			_, _ = unix.Wait4(p.pid, nil, unix.WNOHANG, nil)
		}
	}
}
