package fsmirror

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Reach says whether other hosts may reach a file system, as far as its
// type tells.
type Reach int

// The reaches of a file system type.
const (
	Local        Reach = iota // one host: ext4, xfs, btrfs, tmpfs, …
	Network                   // shared over the network by design: NFS, SMB, Ceph, Lustre, …
	MaybeNetwork              // FUSE: the kernel cannot tell what is behind it
)

// FSType is a file system type as statfs(2) names it in f_type.
type FSType struct {
	Magic int64
	Name  string // "nfs", "cifs", "fuse"; the magic in hex for a type not in the table
	Reach Reach
}

// Shared reports whether other hosts may use the file system too: Network
// or MaybeNetwork.
func (t FSType) Shared() bool { return t.Reach != Local }

// Describe names the type for a message: "nfs (a network file system)".
func (t FSType) Describe() string {
	switch t.Reach {
	case Network:
		return t.Name + " (a network file system)"
	case MaybeNetwork:
		return t.Name + " (a FUSE file system such as sshfs, GlusterFS, s3fs or virtiofs: possibly a network one)"
	}
	return t.Name
}

// fsTypes are the file systems other hosts may reach, by f_type (see
// statfs(2) and linux/magic.h). FUSE counts as possibly shared: it
// carries sshfs, GlusterFS, CephFS's and MooseFS's clients, s3fs and
// virtiofs alike, and its flock is by default local to the host, so a
// tree there is treated as shared unless the user says otherwise.
var fsTypes = []FSType{
	{0x6969, "nfs", Network},
	{0xFF534D42, "cifs", Network},
	{0xFE534D42, "smb2", Network},
	{0x517B, "smb", Network},
	{0x00C36400, "ceph", Network},
	{0x5346414F, "afs", Network},
	{0x6B414653, "kafs", Network},
	{0x0BD00BD0, "lustre", Network},
	{0x47504653, "gpfs", Network},
	{0x01021997, "9p", Network},
	{0x7461636F, "ocfs2", Network},
	{0x01161970, "gfs2", Network},
	{0x73757245, "coda", Network},
	{0x564C, "ncp", Network},
	{0x20030528, "pvfs2", Network},
	{0x19830326, "beegfs", Network},
	{0xAAD7AAEA, "panfs", Network},
	{0x786F4256, "vboxsf", Network},
	{0x65735546, "fuse", MaybeNetwork},
}

// FSTypeNamed returns the table's entry called name ("nfs", "fuse"), for
// tests that pretend a tree is on such a file system; ok is false for a
// name not in the table.
func FSTypeNamed(name string) (t FSType, ok bool) {
	for _, t := range fsTypes {
		if t.Name == name {
			return t, true
		}
	}
	return FSType{}, false
}

// fsTypeOf names the type of the file system that st describes.
func fsTypeOf(st *unix.Statfs_t) FSType {
	magic := int64(uint32(st.Type)) // f_type is signed on some architectures
	for _, t := range fsTypes {
		if t.Magic == magic {
			return t
		}
	}
	return FSType{Magic: magic, Name: fmt.Sprintf("%#x", magic), Reach: Local}
}

// FileSystemAt returns the type of the file system path is on. A path
// that does not exist yet (init creates its root) is judged by its
// nearest existing parent, where it will be made.
func FileSystemAt(path string) (FSType, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return FSType{}, err
	}
	for p := abs; ; p = filepath.Dir(p) {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			return fsTypeOf(&st), nil
		}
		if !errors.Is(err, unix.ENOENT) || p == filepath.Dir(p) {
			return FSType{}, &fs.PathError{Op: "statfs", Path: p, Err: err}
		}
	}
}

// FileSystem returns the type of the file system that holds the tree's
// .fence directory (the journal and its lock): one fstatfs.
func (m *Mirror) FileSystem() (FSType, error) {
	fd, err := m.dirfd(Meta)
	if err != nil {
		return FSType{}, err
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return FSType{}, &fs.PathError{Op: "statfs", Path: m.Path(Meta, ""), Err: err}
	}
	return fsTypeOf(&st), nil
}
