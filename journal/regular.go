package journal

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// NotRegularError says a file fencectl keeps in .fence/ (its lock, the
// boot record, the journal config…) is something else: a FIFO, a device,
// a socket, a directory. Opening a FIFO waits for a peer that never
// comes, so every command would hang past its --timeout.
type NotRegularError struct {
	Path string
	Kind string // "a FIFO", "a directory"…
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is not a regular file but %s", e.Path, e.Kind)
}

// kindOf names the file type of a stat mode.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// OpenRegular opens path as open(2) does with flag, never following a
// symlink, never waiting (O_NONBLOCK: a FIFO opens at once, or fails),
// and refuses anything but a regular file with a *NotRegularError. The
// file it returns blocks as usual, and is not registered with the
// runtime's network poller (os.OpenFile would create its epoll instance
// in a process whose first file this is: six system calls for nothing).
func OpenRegular(path string, flag int, perm uint32) (*os.File, error) {
	fd, err := unix.Open(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &NotRegularError{Path: path, Kind: kindOf(st.Mode)}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ReadRegular reads the small file at path (at most max bytes) through
// OpenRegular.
func ReadRegular(path string, max int64) ([]byte, error) {
	f, err := OpenRegular(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}
