package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The guard is a small process `fencectl run` starts from its own binary
// (cgroup and pgroup containment), through a middle process that exits at
// once, so that the guard is not run's child (see startGuard): it holds the read end of a pipe whose
// write end only run holds, the run's request lock if any, and run's
// liveness anchor (a file whose lock says run's claims have a live
// holder: the guard's copy shares run's lock). When the
// pipe reaches EOF — run exited, or was killed with SIGKILL and could do
// nothing itself — the guard kills what is left of CMD (the whole cgroup
// through cgroup.kill, or CMD's process group), removes the cgroup and
// exits, and only then is the request id free again, and run's tasks
// seen as their holder's death (found from outside: a SIGKILLed run's task
// was handed on at once, while a stopped guard let CMD's escaped children
// run on). It runs in its own
// session, so a signal to run's process group or terminal does not reach
// it, and it is never inside the cgroup it kills.

// guardEnv names the guard mode: the cgroup directory to kill ("-" for
// none), or guardProbe.
const guardEnv = "FENCECTL_RUN_GUARD"

// guardProbe makes the binary exit 0 at once: run starts it the way it
// will start CMD, to learn whether the kernel allows that containment.
const guardProbe = "probe"

// guardSpawnEnv makes the binary the guard's middle process: it starts
// the guard and exits at once, so that the guard is not run's child. Its
// value is how many descriptors from fd 3 on it passes on.
const guardSpawnEnv = "FENCECTL_RUN_GUARD_SPAWN"

func init() {
	mode, ok := os.LookupEnv(guardEnv)
	if !ok {
		return
	}
	switch {
	case os.Getenv(guardSpawnEnv) != "":
		os.Exit(guardSpawn(mode, os.Getenv(guardSpawnEnv)))
	case mode != guardProbe:
		guardMain(mode)
	}
	os.Exit(0)
}

// guardSpawn starts the guard for mode in a session of its own, passing
// on files descriptors from fd 3 on: run's pipe, the guard's end of
// guardProc.done, then what it holds (the request lock, the liveness
// anchor); it prints the guard's pid and returns without waiting.
func guardSpawn(mode, files string) int {
	n, err := strconv.Atoi(files)
	if err != nil || n < 2 || n > 4 {
		fmt.Fprintf(os.Stderr, "fencectl run: %s=%q: want 2 to 4\n", guardSpawnEnv, files)
		return 1
	}
	g := exec.Command("/proc/self/exe")
	g.Env = []string{guardEnv + "=" + mode}
	for fd := 3; fd < 3+n; fd++ {
		g.ExtraFiles = append(g.ExtraFiles, os.NewFile(uintptr(fd), "fd"+strconv.Itoa(fd)))
	}
	g.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := g.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "fencectl run: start the guard:", err)
		return 1
	}
	fmt.Println(g.Process.Pid)
	return 0
}

// guardMain reads run's messages on fd 3 until EOF: "pgroup N" when CMD
// starts in process group N, "idle" when run has killed and reaped
// everything of that task itself. In cgroup mode run sends neither: the
// cgroup holds CMD's process group too.
func guardMain(cgroup string) {
	pgid := 0
	sc := bufio.NewScanner(os.NewFile(3, "run"))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "pgroup":
			pgid, _ = strconv.Atoi(f[1])
		case len(f) == 1 && f[0] == "idle":
			pgid = 0
		}
	}
	if pgid > 1 {
		_ = unix.Kill(-pgid, unix.SIGKILL)
	}
	if cgroup != "-" {
		removeCgroup(cgroup)
	}
}

// removeCgroup kills everything in the run's cgroup dir and its task
// cgroups, and removes them.
func removeCgroup(dir string) {
	// cgroup.kill on dir kills its task cgroups too, at once; each is then
	// waited for (dir's own cgroup.procs lists none of their processes).
	killCgroup(dir, 10*time.Second)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			sub := filepath.Join(dir, e.Name())
			killCgroup(sub, 10*time.Second)
			_ = unix.Rmdir(sub)
		}
	}
	_ = unix.Rmdir(dir)
}

// sweepCgroups removes the cgroups of runs that died with their guard
// (both killed): the name says whose each is.
func sweepCgroups(parent string) {
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "fencectl-run-"))
		if err != nil || !e.IsDir() || !strings.HasPrefix(e.Name(), "fencectl-run-") {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			removeCgroup(filepath.Join(parent, e.Name()))
		}
	}
}

// killCgroup kills every process in the cgroup dir (cgroup.kill: the
// kernel's own, race-free against forks) and waits, up to bound, until
// the cgroup is empty. It reports whether it is.
func killCgroup(dir string, bound time.Duration) bool {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return os.IsNotExist(err)
	}
	end := time.Now().Add(bound)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}
