package main

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// A command run under a task writes to run's own stdout and stderr. When
// whoever read them has gone (`fencectl run --loop -- CMD | head`), every
// command's first write dies of SIGPIPE: that failure is the reader's, not
// the task's. Failing the task for it burned an attempt of every task in
// the tree, one after another, each "killed by broken pipe". run releases
// the task instead, counting no attempt, and stops.

// exitBrokenPipe is what a shell reports for a process killed by SIGPIPE.
const exitBrokenPipe = 128 + int(unix.SIGPIPE)

// outputGone names the stream of run's that a command writes to and that
// has no reader any more (a pipe or socket whose other end is closed, a
// terminal hung up), or "" if both are still read.
func (o *output) outputGone() string {
	for _, s := range []struct {
		name string
		w    io.Writer
	}{{"stdout", o.stdout}, {"stderr", o.stderr}} {
		if f, ok := fileOf(s.w); ok && noReader(f) {
			return s.name
		}
	}
	return ""
}

// noReader reports whether writes to f can no longer be read: poll says
// POLLERR for a pipe whose read end is closed, POLLHUP for a hung-up
// terminal or a socket shut down by its peer. A file, /dev/null or a
// live pipe says neither.
func noReader(f *os.File) bool {
	gone, err := pollSays(f, unix.POLLOUT, unix.POLLERR|unix.POLLHUP)
	return err == nil && gone
}

// pollSays polls c once, without waiting, for events, and reports
// whether it answers any of says. The descriptor is reached through
// SyscallConn, not Fd(), which would make an *os.File blocking.
func pollSays(c syscall.Conn, events, says int16) (bool, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return false, err
	}
	hit := false
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, perr := unix.Poll(fds, 0)
		hit = perr == nil && n == 1 && fds[0].Revents&says != 0
	})
	return hit, err
}

// outputGoneError ends run: the task under a command that failed while
// run's output had no reader was released, not failed, and no other task
// is claimed to meet the same end.
type outputGoneError struct {
	stream string
	err    error // the release's, if it did not get through
}

func (e *outputGoneError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("run's %s has no reader (broken pipe), so the command's failure was not its task's; releasing the task failed: %v", e.stream, e.err)
	}
	return fmt.Sprintf("run's %s has no reader (broken pipe), so the command's failure was not its task's: the task was released, no attempt counted; stopping", e.stream)
}

func (e *outputGoneError) Unwrap() error { return e.err }
