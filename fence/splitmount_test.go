package fence_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/fsmirror"
)

// A directory of the tree that is a mount of its own: every move into or
// out of it fails with EXDEV, after the commit it follows. Before, an add
// with available/ on a tmpfs journaled the task and left its content in
// .fence/tmp (exit 1), and the next writer quarantined that content as an
// orphan and failed the task as missing; a claim with claimed/ on a tmpfs
// issued a token nobody was given. Now every writer refuses such a tree
// before it writes anything, whether the tree was opened before the mount
// (a long-lived process) or after, and a bind mount of the same file
// system counts too (statx's mount id). Needs the right to mount (root in
// the test container).
func TestTree_SplitMountRefusesEveryWriter(t *testing.T) {
	tree, _ := newTreeWith(t, testDefaults, fence.Options{})
	add(t, tree, "t1", 0)
	add(t, tree, "t2", 0)
	held := claim(t, tree, "t2", "a")
	root := tree.Root()
	writers := []struct {
		name string
		call func(tr *fence.Tree) error
	}{
		{"add", func(tr *fence.Tree) error {
			_, err := tr.Add(bg, fence.AddRequest{ID: "t9", Content: strings.NewReader("new")})
			return err
		}},
		{"claim", func(tr *fence.Tree) error { _, err := tr.Claim(bg, fence.ClaimRequest{Agent: "b"}); return err }},
		{"heartbeat", func(tr *fence.Tree) error {
			_, err := tr.Heartbeat(bg, fence.FencedRequest{ID: "t2", Token: held.Token})
			return err
		}},
		{"put", func(tr *fence.Tree) error {
			_, err := tr.Put(bg, fence.FencedRequest{ID: "t2", Token: held.Token}, "result", strings.NewReader("out"))
			return err
		}},
		{"complete", func(tr *fence.Tree) error {
			_, err := tr.Complete(bg, fence.FencedRequest{ID: "t2", Token: held.Token})
			return err
		}},
		{"replay", func(tr *fence.Tree) error { _, err := tr.Replay(bg, false); return err }},
		{"compact", func(tr *fence.Tree) error { _, err := tr.Compact(bg, fence.CompactRequest{}); return err }},
	}
	mounts := []struct {
		dir  fsmirror.Dir
		bind bool // a bind mount of the directory onto itself: one file system, another mount
	}{
		{fsmirror.Available, false},
		{fsmirror.Claimed, false},
		{fsmirror.Done, false},
		{fsmirror.Out, false},
		{fsmirror.Staging, false},
		{fsmirror.Done, true},
	}
	for _, m := range mounts {
		dir := filepath.Join(root, string(m.dir))
		var err error
		if m.bind {
			err = unix.Mount(dir, dir, "", unix.MS_BIND, "")
		} else {
			err = unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m")
		}
		if err != nil {
			t.Skipf("cannot mount on %s here (%v): needs the right to mount", m.dir, err)
		}
		unmount := sync.OnceValue(func() error { return unix.Unmount(dir, unix.MNT_DETACH) })
		t.Cleanup(func() { _ = unmount() })
		before := snap(t, tree)
		fresh, err := fence.Open(root, fence.Options{Clock: testClock})
		if err != nil {
			t.Fatalf("open with %s/ mounted (readers must still open it): %v", m.dir, err)
		}
		for _, tr := range []struct {
			name string
			tree *fence.Tree
		}{{"opened before the mount", tree}, {"opened after", fresh}} {
			for _, w := range writers {
				err := w.call(tr.tree)
				var split *fsmirror.SplitMountError
				if !errors.As(err, &split) || len(split.Dirs) != 1 || split.Dirs[0] != m.dir {
					t.Errorf("%s on a tree %s with %s/ mounted (bind %v): %v, want a SplitMountError naming %s/", w.name, tr.name, m.dir, m.bind, err, m.dir)
				}
				unchanged(t, tree, before, w.name+" with "+string(m.dir)+"/ mounted")
			}
		}
		if _, err := fresh.Status(bg); err != nil {
			t.Errorf("status with %s/ mounted: %v", m.dir, err)
		}
		fresh.Close()
		if err := unmount(); err != nil {
			t.Fatalf("unmount %s: %v", dir, err)
		}
		if entries, err := os.ReadDir(filepath.Join(root, string(fsmirror.Staging))); err != nil || len(entries) != 0 {
			t.Errorf("with %s/ mounted, .fence/tmp was left with %v (%v)", m.dir, names(entries), err)
		}
	}
	// Unmounted again, the long-lived tree writes as before.
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t2", Token: held.Token}); err != nil {
		t.Errorf("complete once every directory is on the tree's mount again: %v", err)
	}
}
