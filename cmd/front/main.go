// Command front is the program users run as fencectl (make build installs
// it as bin/fencectl): it sends an agent's steps to the host's daemon for
// the tree and hands every other command to the full command set,
// fencectl-full, beside it.
//
// A claim through the CLI is a process start, and a process start is paid
// by every claim: the full command set's package initialisers, its larger
// binary's page faults and its own commit cost about twice what a Go
// hello-world costs. The front links only what sending one command line
// needs, so that a step costs a hello-world's start and one round trip to
// a daemon that keeps the tree open and commits concurrent steps in groups
// (cmd/fencectl/daemon.go): fewer syncs per step, none of them in the
// step's own process.
//
// The front decides nothing a command does. When it cannot tell for sure
// that the daemon may run the command (a flag it does not read, a test
// hook, input the step reads, a daemon that declines or cannot be
// reached), it replaces itself with fencectl-full, which runs the command
// as it always has. A daemon checks the tree the command line names
// against its own before it runs anything (checkServedTree).
//
// The runtime would keep a goroutine that updates GOMAXPROCS as the
// cgroup's CPU limit changes, for a program that runs one goroutine for
// a few milliseconds.
//
//go:debug updatemaxprocs=0
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/cmd/internal/daemonlink"
)

// fullName is the full command set's program, beside this one.
const fullName = "fencectl-full"

func main() {
	if s, ok := readStep(os.Args[1:]); ok {
		if code, done := send(s); done {
			os.Exit(code)
		}
	}
	handOn(nil)
}

// step is a command line the daemon may run, as far as the front reads it.
type step struct {
	command string
	root    string        // the tree: --dir, else FENCE_DIR, else ., absolute
	cwd     string        // this process's working directory
	timeout time.Duration // --timeout, else FENCE_TIMEOUT, else the default
	env     map[string]string
}

// readStep reads args (after the program name). ok is false unless
// they are one of the steps a daemon runs, with nothing the front does
// not read: global flags other than --dir, --json and --timeout, a help
// or version flag, claim --wait (its process watches the reader while it
// waits), complete --result (it reads a file), or words that are not
// UTF-8 (JSON would change them on the way).
func readStep(args []string) (s step, ok bool) {
	env := daemonlink.FenceEnv()
	switch env["FENCE_DAEMON"] {
	case "", "on", daemonlink.Existing:
	default:
		return s, false // off, or a value fencectl-full refuses
	}
	if daemonlink.TestHooksSet(env) || env["FENCE_LOCK_MODE"] != "" || daemonlink.RelativeTLSFiles(env) {
		return s, false
	}
	for k, v := range env {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return s, false
		}
	}
	for _, a := range args {
		if !utf8.ValidString(a) {
			return s, false
		}
	}
	dir, dirSet := "", false
	timeout, timeoutSet := "", false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if s.command == "" {
				return s, false
			}
			break
		}
		if len(a) < 2 || a[0] != '-' {
			if s.command == "" {
				if !daemonlink.Serves[a] {
					return s, false
				}
				s.command = a
			}
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "dir" || name == "timeout":
			if !hasValue {
				if i+1 >= len(args) {
					return s, false
				}
				i++
				value = args[i]
			}
			if name == "dir" {
				if value == "" {
					return s, false // fencectl-full refuses an empty --dir
				}
				dir, dirSet = value, true
			} else {
				timeout, timeoutSet = value, true
			}
		case name == "json":
		case s.command == "":
			return s, false // a global flag the front does not read
		case name == "help" || name == "h" || name == "wait" || name == "result":
			return s, false
		}
	}
	if s.command == "" {
		return s, false
	}
	if !dirSet {
		dir = env["FENCE_DIR"]
	}
	if dir == "" {
		dir = "."
	}
	if !timeoutSet {
		timeout = env["FENCE_TIMEOUT"]
	}
	s.timeout = daemonlink.DefaultTimeout
	if timeout != "" {
		d, err := time.ParseDuration(timeout)
		if err != nil || d < 0 {
			return s, false // fencectl-full says what is wrong with it
		}
		s.timeout = d
	}
	cwd, err := os.Getwd()
	if err != nil {
		return s, false
	}
	s.cwd, s.env = cwd, env
	s.root = dir
	if !filepath.IsAbs(dir) {
		s.root = filepath.Join(cwd, dir)
	}
	s.root = filepath.Clean(s.root)
	// A claim for a reader that has gone is not made: fencectl-full
	// says so.
	if s.command == "claim" && noReader(1) {
		return s, false
	}
	return s, true
}

// handOn replaces this process with fencectl-full, run with the same
// command line and environment, plus set. It returns only on failure,
// by exiting.
func handOn(set map[string]string) {
	path, err := beside(fullName)
	if err == nil && sameFile(path, "/proc/self/exe") {
		err = fmt.Errorf("%s is this very program, not the full command set: build it with `make build`", path)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fencectl: %v\n", err)
		os.Exit(1)
	}
	env := os.Environ()
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	// The name it answers to (a test binary dispatches on it).
	argv := append([]string{"fencectl"}, os.Args[1:]...)
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "fencectl: cannot run %s: %v\n", path, err)
	os.Exit(1)
}

// beside is the program prog: beside this executable, else on PATH.
func beside(prog string) (string, error) {
	self, _ := os.Executable()
	if self != "" {
		if self, err := filepath.EvalSymlinks(self); err == nil {
			if p := filepath.Join(filepath.Dir(self), prog); isExecutable(p) {
				return p, nil
			}
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		if p := filepath.Join(dir, prog); isExecutable(p) && !sameFile(p, self) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not beside this fencectl (%s) nor on PATH: install it beside it (make install puts them in place)", prog, self)
}

// sameFile reports whether a and b are one file: this front found under
// another name must not hand a command to itself forever.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// noReader reports whether fd is a pipe or socket whose reader has gone.
func noReader(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}
