package fence

import (
	"fmt"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
)

// A bbolt journal is safe only on a local file system: bbolt reads it
// through a memory map that another host's writes do not keep coherent,
// and .fence/lock's flock is, on NFS, SMB or FUSE, either local to each
// host or an emulation fencectl was never tested on. Two hosts sharing
// such a journal can both believe they hold the lock and hand one task to
// two agents, the very thing fencectl exists to prevent. So init refuses
// to make a bbolt journal on a file system other hosts may reach (unless
// told: Options.AllowNetworkFS), and Open warns about one that is there.
// A store that lives elsewhere (etcd) is not concerned.

// localOnly reports whether store keeps its journal in files that only
// one host may use.
func localOnly(store journal.Backend) bool {
	switch store.(type) {
	case boltstore.Backend, *boltstore.Backend:
		return true
	}
	return false
}

// fsTypeOf is the type of the file system of path (or, with m, of m's
// .fence), or the one a test build pretends (FENCE_TEST_FSTYPE).
func fsTypeOf(path string, m *fsmirror.Mirror) (fsmirror.FSType, error) {
	if name := testFSType(); name != "" {
		if t, ok := fsmirror.FSTypeNamed(name); ok {
			return t, nil
		}
		return fsmirror.FSType{Name: name}, nil // a local type the table does not name
	}
	if m != nil {
		return m.FileSystem()
	}
	return fsmirror.FileSystemAt(path)
}

// refuseNetworkFS refuses to make a journal of store under root when root
// is on a file system other hosts may reach and the journal would not be
// safe there (see localOnly), unless allow. It runs before anything is
// created. A statfs that fails refuses nothing: making the tree will say
// what is wrong with root.
func refuseNetworkFS(root string, store journal.Backend, allow bool) error {
	if allow || !localOnly(store) {
		return nil
	}
	t, err := fsTypeOf(root, nil)
	if err != nil || !t.Shared() {
		return nil
	}
	return invalidf(InputRoot, RuleNetworkFS, root, "%s is on %s: a bbolt journal is safe only on a local file system that one host uses (its memory map and its lock do not hold across hosts); nothing created.", root, t.Describe())
}

// warnNetworkFS warns, once per Open, when the tree's bbolt journal is on
// a file system other hosts may reach: one fstatfs.
func (t *Tree) warnNetworkFS() {
	if !localOnly(t.store) {
		return
	}
	ft, err := fsTypeOf("", t.mirror)
	if err != nil || !ft.Shared() {
		return
	}
	t.notify(NoticeWarning, t.root, fmt.Sprintf("the journal is on %s: a bbolt journal is safe only while one host alone uses the tree; a tree that several hosts share needs an etcd journal", ft.Describe()))
}
