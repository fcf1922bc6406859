package bolt

import (
	"os"

	"golang.org/x/sys/unix"
)

// renameat2 is unix.Renameat2; tests replace it to answer as NFS does.
var renameat2 = unix.Renameat2

// renameNoReplace renames oldpath to newpath, never over an existing file:
// renameat2(RENAME_NOREPLACE), or, where the file system lacks it (NFS,
// for a tree made with --allow-network-fs), a hard link then the removal
// of the old name. link fails with EEXIST on an occupied name just as
// atomically, even on NFS.
func renameNoReplace(oldpath, newpath string) error {
	err := renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if err != unix.EINVAL && err != unix.ENOSYS && err != unix.EOPNOTSUPP {
		return err
	}
	if err := os.Link(oldpath, newpath); err != nil {
		return err
	}
	return os.Remove(oldpath)
}
