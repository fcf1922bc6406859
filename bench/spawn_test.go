package bench

import (
	"errors"
	"io"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// outputOf runs cmd and returns its standard output, as cmd.Output does,
// with the standard error in the *exec.ExitError of a failure. It hands
// the child memory files (memfd) instead of pipes, so what is timed around
// it is the child's own life, from fork to exit.
//
// With pipes, the Go runtime of this process reads the child's output in
// goroutines woken through its network poller, and on two busy cores that
// wake-up came late: measured with a claim that printed the time just
// before it exited, the time from there until Output returned was 10 ms
// at the median and 90–160 ms for the slowest 1% of claims at 8
// processes, against 1–7 ms in main() for those same claims. The p99 of
// a claim was the pipe's, not the claim's. A shell's $(…) has no such
// poller; neither, now, has the benchmark. Every process whose time a
// benchmark sets beside another's is started this way, so both sides pay
// the same.
func outputOf(cmd *exec.Cmd) ([]byte, error) {
	out, err := memFile("stdout")
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd.Stdout = out
	var errOut *os.File
	if cmd.Stderr == nil {
		if errOut, err = memFile("stderr"); err != nil {
			return nil, err
		}
		defer errOut.Close()
		cmd.Stderr = errOut
	}
	runErr := cmd.Run()
	stdout, err := readAll(out)
	if err != nil {
		return nil, err
	}
	var ee *exec.ExitError
	if errors.As(runErr, &ee) && errOut != nil {
		ee.Stderr, _ = readAll(errOut)
	}
	return stdout, runErr
}

// memFile is an anonymous file in memory, closed on exec in this process
// only (exec dups it onto the child's descriptor 1 or 2).
func memFile(name string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// readAll reads f from its start.
func readAll(f *os.File) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// runOf runs cmd as outputOf does, for its exit status alone.
func runOf(cmd *exec.Cmd) error {
	_, err := outputOf(cmd)
	return err
}
