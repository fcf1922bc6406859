package fsmirror

import (
	"fmt"
	"io/fs"
	"strings"

	"golang.org/x/sys/unix"
)

// One mount for the whole tree. Every move of a task file is a rename
// between two of the tree's directories (.fence/tmp into available/,
// available/ to claimed/, out of inbox/, into .fence/quarantine), and a
// rename cannot cross mounts: the kernel answers EXDEV. A directory that is
// a mount of its own (a tmpfs on claimed/, a container volume on done/, a
// bind mount of out/) would fail the move that follows a commit: the
// journal says claimed and the file stays in available/, or, for add, the
// journal holds a task whose content never left .fence/tmp. So such a tree
// is refused to every writer before it writes anything (SplitMount), and
// readers still see it. inbox/ alone may be a mount: its files are staged
// into .fence/tmp before the commit that adopts them, so one that cannot
// move is reported and left there, and nothing was written for it.

// mountKey identifies the mount a directory is on: statx's mount id
// (Linux 5.8 and later), which tells bind mounts of one file system
// apart, or else the device.
type mountKey struct{ mnt, dev uint64 }

// sameMount reports whether a and b are on one mount. Mount ids are
// compared when both are known, devices otherwise.
func sameMount(a, b mountKey) bool {
	if a.mnt != 0 && b.mnt != 0 {
		return a.mnt == b.mnt
	}
	return a.dev == b.dev
}

// statDir returns the identity of the directory open at fd and the mount
// it is on.
func statDir(fd int, path string) (fileID, mountKey, error) {
	id, key, _, err := statAt(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, path)
	return id, key, err
}

// statAt is fstatat(dirfd, name, flags) that also says which mount the
// entry is on, in one statx: its identity, its mount and its mode. Where
// statx is not allowed (an old seccomp profile answers ENOSYS or EPERM),
// fstatat's device stands in for the mount.
func statAt(dirfd int, name string, flags int, path string) (fileID, mountKey, uint32, error) {
	var stx unix.Statx_t
	err := unix.Statx(dirfd, name, flags, unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_INO|unix.STATX_MNT_ID, &stx)
	if err == unix.ENOSYS || err == unix.EPERM {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, flags); err != nil {
			return fileID{}, mountKey{}, 0, &fs.PathError{Op: "lstat", Path: path, Err: err}
		}
		return idOf(&st), mountKey{dev: uint64(st.Dev)}, st.Mode, nil
	}
	if err != nil {
		return fileID{}, mountKey{}, 0, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	// Mkdev encodes the device as stat(2)'s st_dev does, so these ids
	// compare equal with idOf's.
	id := fileID{dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), ino: stx.Ino}
	key := mountKey{dev: id.dev}
	if stx.Mask&unix.STATX_MNT_ID != 0 {
		key.mnt = stx.Mnt_id
	}
	return id, key, uint32(stx.Mode), nil
}

// SplitMountError refuses writes to a tree some of whose directories are
// on another mount than its root (see the top of this file).
type SplitMountError struct {
	Root string
	Dirs []Dir // the directories on another mount, in layout order
}

func (e *SplitMountError) Error() string {
	names := make([]string, len(e.Dirs))
	for i, d := range e.Dirs {
		names[i] = string(d) + "/"
	}
	verb := "is a mount of its own"
	if len(names) > 1 {
		verb = "are mounts of their own"
	}
	return fmt.Sprintf("tree %s: %s %s, not on the tree's mount: fencectl moves task files between the tree's directories by rename, which cannot cross mounts, so it writes nothing to this tree; nothing changed. Mount the tree's root instead, so that every directory of it (.fence included) is on one mount",
		e.Root, strings.Join(names, ", "), verb)
}

// SplitMount is a *SplitMountError if a directory of the tree, as last
// opened or refreshed, is on another mount than the root; nil otherwise.
func (m *Mirror) SplitMount() error {
	tab := m.tab.Load()
	if tab == nil {
		return fmt.Errorf("tree %s: %w", m.root, fs.ErrClosed)
	}
	var split []Dir
	for _, l := range layout {
		if l.dir != Inbox && !sameMount(tab.mounts[l.dir], tab.rootMount) {
			split = append(split, l.dir)
		}
	}
	if split == nil {
		return nil
	}
	return &SplitMountError{Root: m.root, Dirs: split}
}
