package fence_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fence"
)

// A real EXDEV: inbox/ is a mount point (a tmpfs), so no file dropped
// there can be renamed into the tree. Every such file is reported and
// left, and writers go on: before, the adoption committed, the rename
// failed, and every later writer failed the same way. Needs the right to
// mount (root in the test container); elsewhere the injected-fault
// scripts (adopt_unmovable_inbox_file.txtar) cover the same path.
func TestTree_InboxOnOtherFileSystem(t *testing.T) {
	tree, n := newTreeWith(t, testDefaults, fence.Options{})
	inbox := filepath.Join(tree.Root(), "inbox")
	if err := unix.Mount("tmpfs", inbox, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs on inbox/ here (%v): covered by the injected-fault scripts", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(inbox, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", inbox, err)
		}
	})
	// A tree opened before the mount holds the old inbox/; open it again.
	tree2, err := fence.Open(tree.Root(), fence.Options{Notify: n.add})
	if err != nil {
		t.Fatal(err)
	}
	defer tree2.Close()
	add(t, tree2, "t1", 0)
	if err := os.WriteFile(filepath.Join(inbox, "dropped"), []byte("job"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := claim(t, tree2, "t1", "a")
	if _, err := tree2.Heartbeat(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
		t.Fatalf("heartbeat with an unmovable inbox file: %v", err)
	}
	if !n.has(fence.NoticeInboxUnmovable, "dropped") {
		t.Errorf("no inbox_unmovable notice for dropped; notices: %+v", n.list)
	}
	if _, err := os.Stat(filepath.Join(inbox, "dropped")); err != nil {
		t.Errorf("the unmovable file did not stay in inbox/: %v", err)
	}
	if _, err := tree2.Show(bg, "dropped"); err == nil {
		t.Errorf("the unmovable file became a task")
	}
	if _, err := tree2.Complete(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
		t.Fatalf("complete with an unmovable inbox file: %v", err)
	}
}
