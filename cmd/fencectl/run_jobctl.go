package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Job control: Ctrl-Z on `fencectl run`.
//
// CMD runs in a process group of its own (so that run can signal all of
// it), and the terminal's SIGTSTP goes to the foreground group only: it
// would stop run and leave CMD working, with nobody heartbeating, past its
// lease and beside the agent that takes the task next. So run stops its
// commands with itself (SIGSTOP to each group, and a freeze of each task's
// cgroup, which holds what left the group; without a cgroup, SIGSTOP to
// every other process of the command: a setsid child, which its group
// does not hold, worked on past the lease, found from outside), then
// stops. On SIGCONT it
// wakes each command only if its lease can still be kept: one whose stop
// point passed while everything was stopped is killed, never woken, as the
// lease may be another agent's by now.

// jobControl knows the commands run is running, to stop and wake them.
type jobControl struct {
	mu   sync.Mutex
	cmds map[int]pausable // by process group
	// spare is the guard's pid (0: none), which is no process of a
	// command: stopped, it could not kill them should run die.
	spare func() int
	// holdWrites waits for run's write in flight and starts no other
	// until let go (fence.Tree.HoldWrites): run does not stop holding
	// the tree's lock. nil: none to hold.
	holdWrites func() (release func())
}

// pausable is one running command: its cgroup ("" in pgroup mode) and
// when it must stop (its lease's deadline less the margin run keeps).
type pausable struct {
	cgroup string
	stopAt func() time.Time
}

// jobSignals are the terminal's stop signals.
var jobSignals = []os.Signal{syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}

// startJobControl handles the stop signals until the returned function
// is called.
func startJobControl() (*jobControl, func()) {
	jc := &jobControl{cmds: map[int]pausable{}}
	c := make(chan os.Signal, 1)
	signal.Notify(c, jobSignals...)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-c:
				jc.suspend()
			case <-done:
				return
			}
		}
	}()
	return jc, func() { signal.Stop(c); close(done) }
}

// starting holds off a Ctrl-Z while a command starts: call the function
// it returns once the command has started (pgid > 0) or failed to (0). It
// returns what forgets the command.
func (jc *jobControl) starting() func(pgid int, p pausable) (forget func()) {
	if jc == nil {
		return func(int, pausable) func() { return func() {} }
	}
	jc.mu.Lock()
	return func(pgid int, p pausable) func() {
		defer jc.mu.Unlock()
		if pgid <= 0 {
			return func() {}
		}
		jc.cmds[pgid] = p
		return func() {
			jc.mu.Lock()
			delete(jc.cmds, pgid)
			jc.mu.Unlock()
		}
	}
}

// suspend stops every command, then run itself; when run is continued,
// it wakes the commands whose leases can still be kept and kills the
// others. The commands stay registered: supervise sees a killed one end.
func (jc *jobControl) suspend() {
	if !canStop() {
		return // the kernel would discard the stop: nothing stops, CMD included
	}
	for !jc.mu.TryLock() {
		// A command is being started (starting holds jc.mu): its child
		// was in run's process group when the terminal's stop came, and
		// stops on it just before it execs (in its own group by then), so
		// the start waited for it for good, the journal's lock held (found
		// from outside). Wake it (run's children, none of them stopped
		// yet); the start then ends, and the command is stopped below.
		jc.wakeChildren()
		time.Sleep(time.Millisecond)
	}
	defer jc.mu.Unlock()
	for pgid, p := range jc.cmds {
		freeze(p.cgroup, "1")
		_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	}
	rest := jc.stopRest()
	release := func() {}
	if jc.holdWrites != nil {
		// A commit of run's in flight holds the tree's lock: stopped with
		// it, run kept every other agent out until fg (found from outside).
		release = jc.holdWrites()
	}
	stopSelf()
	defer release()
	for pgid, p := range jc.cmds {
		if !now().Before(p.stopAt()) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL) // a stopped process dies too
			for _, pid := range rest[pgid] {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if p.cgroup != "" {
				killCgroup(p.cgroup, time.Second)
			}
			freeze(p.cgroup, "0")
			continue
		}
		freeze(p.cgroup, "0")
		for _, pid := range rest[pgid] {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
	}
}

// wakeChildren sends SIGCONT to run's process group and to each of its
// children but the guard.
func (jc *jobControl) wakeChildren() {
	_ = syscall.Kill(-syscall.Getpgrp(), syscall.SIGCONT)
	guard := 0
	if jc.spare != nil {
		guard = jc.spare()
	}
	for _, p := range processes() {
		if p.ppid == os.Getpid() && p.pid != guard {
			_ = syscall.Kill(p.pid, syscall.SIGCONT)
		}
	}
}

// stopRest SIGSTOPs the processes of the commands without a cgroup that
// their process groups may not hold (a setsid child: pgroup containment,
// where run, a subreaper, inherits it; a PID namespace, where it is its
// command's), and returns them by the command each belongs to: the one
// it descends from, or the only command (pgroup mode runs one). Looked for
// again until a look finds none new: a process stopped cannot fork.
func (jc *jobControl) stopRest() map[int][]int {
	rest := map[int][]int{}
	var only int
	for pgid, p := range jc.cmds {
		if p.cgroup != "" {
			return rest // cgroup mode: the freeze holds everything
		}
		only = pgid
	}
	if len(jc.cmds) != 1 {
		only = 0
	}
	spare := map[int]bool{}
	if jc.spare != nil {
		if g := jc.spare(); g > 0 {
			spare[g] = true
		}
	}
	stopped := map[int]bool{}
	for range 8 {
		ds := descendants(os.Getpid(), spare)
		parent := map[int]int{}
		for _, d := range ds {
			parent[d.pid] = d.ppid
		}
		found := false
		for _, d := range ds {
			if stopped[d.pid] || d.zombie {
				continue
			}
			owner := only
			for p := d.pid; p != 0; p = parent[p] {
				if _, ok := jc.cmds[p]; ok {
					owner = p
					break
				}
			}
			if owner == 0 {
				continue
			}
			_ = syscall.Kill(d.pid, syscall.SIGSTOP)
			stopped[d.pid] = true
			rest[owner] = append(rest[owner], d.pid)
			found = true
		}
		if !found {
			break
		}
	}
	return rest
}

// stopSelf stops run and returns once it is continued (SIGCONT). It
// stops by SIGSTOP: the Go runtime keeps its own handler for SIGTSTP once
// it was caught, so a SIGTSTP raised again would not stop run. A stop
// lands a moment after kill returns: run waits for the SIGCONT, or for a
// while should the stop not come.
func stopSelf() {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	if syscall.Kill(os.Getpid(), syscall.SIGSTOP) != nil {
		return
	}
	select {
	case <-cont:
	case <-time.After(time.Second):
	}
}

// canStop reports whether a stop signal can stop run: not when its
// process group is orphaned (no parent in the session outside it to
// continue it, as when run was started by a shell that has exited), where
// the kernel discards SIGTSTP. It looks at run's parent only.
func canStop() bool {
	pgid, sid := syscall.Getpgrp(), unixGetsid(0)
	ppid := os.Getppid()
	ppgid, err := syscall.Getpgid(ppid)
	return err == nil && ppgid != pgid && unixGetsid(ppid) == sid
}

// unixGetsid is getsid(pid), -1 on an error.
func unixGetsid(pid int) int {
	sid, err := unix.Getsid(pid)
	if err != nil {
		return -1
	}
	return sid
}

// freeze writes state ("1" frozen, "0" thawed) to a cgroup's
// cgroup.freeze; nothing without a cgroup.
func freeze(cgroup, state string) {
	if cgroup != "" {
		_ = os.WriteFile(filepath.Join(cgroup, "cgroup.freeze"), []byte(state), 0)
	}
}
