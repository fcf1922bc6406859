package fsmirror_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencectl/fencectl/fsmirror"
)

func TestFSTypeNamed(t *testing.T) {
	for _, tt := range []struct {
		name  string
		magic int64
		reach fsmirror.Reach
	}{
		{"nfs", 0x6969, fsmirror.Network},
		{"cifs", 0xFF534D42, fsmirror.Network},
		{"smb2", 0xFE534D42, fsmirror.Network},
		{"smb", 0x517B, fsmirror.Network},
		{"ceph", 0x00C36400, fsmirror.Network},
		{"afs", 0x5346414F, fsmirror.Network},
		{"lustre", 0x0BD00BD0, fsmirror.Network},
		{"gpfs", 0x47504653, fsmirror.Network},
		{"9p", 0x01021997, fsmirror.Network},
		{"ocfs2", 0x7461636F, fsmirror.Network},
		{"fuse", 0x65735546, fsmirror.MaybeNetwork},
	} {
		got, ok := fsmirror.FSTypeNamed(tt.name)
		if !ok || got.Magic != tt.magic || got.Reach != tt.reach || !got.Shared() {
			t.Errorf("FSTypeNamed(%s) = %+v, %v; want magic %#x, reach %d, shared", tt.name, got, ok, tt.magic, tt.reach)
		}
		if !strings.HasPrefix(got.Describe(), tt.name+" (") {
			t.Errorf("%s.Describe() = %q", tt.name, got.Describe())
		}
	}
	if _, ok := fsmirror.FSTypeNamed("ext4"); ok {
		t.Error("ext4 is in the table of shared file systems")
	}
	if (fsmirror.FSType{Name: "ext4"}).Shared() {
		t.Error("the zero Reach is shared")
	}
}

// The tree's own file system and that of a root not made yet (judged by
// its nearest existing parent) are the same type: the one t.TempDir() is on.
func TestFileSystem(t *testing.T) {
	m := newTree(t)
	got, err := m.FileSystem()
	if err != nil || got.Name == "" {
		t.Fatalf("FileSystem = %+v, %v", got, err)
	}
	later, err := fsmirror.FileSystemAt(filepath.Join(m.Root(), "not", "yet"))
	if err != nil || later != got {
		t.Errorf("FileSystemAt(a missing path) = %+v, %v; want %+v", later, err, got)
	}
	// Below a regular file nothing can ever be made: an error, not the
	// parent's type.
	put(t, m, fsmirror.Done, "t1", "")
	if got, err := fsmirror.FileSystemAt(filepath.Join(m.Path(fsmirror.Done, "t1"), "x")); err == nil {
		t.Errorf("FileSystemAt(below a file) = %+v, want an error", got)
	}
}
