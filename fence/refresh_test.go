package fence_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// A long-lived Tree (run --loop, the library) keeps working on the
// directories that are there now: after an operator archives done/
// (`mv done done.old && mkdir done`), completions land in the new done/,
// not in done.old, and the same for every directory of the layout.
func TestTree_ReplacedStateDirectory(t *testing.T) {
	tree, n := newTreeWith(t, testDefaults, fence.Options{})
	root := tree.Root()
	add(t, tree, "t1", 0)
	add(t, tree, "t2", 0)
	c1 := claim(t, tree, "t1", "a")
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t1", Token: c1.Token}); err != nil {
		t.Fatal(err)
	}
	// Archive done/ and the inbox, as an operator would.
	for _, d := range []string{"done", "inbox"} {
		if err := os.Rename(filepath.Join(root, d), filepath.Join(root, d+".old")); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// done.old holds t1, which the journal says is done: put it back so
	// that the tree and the journal agree at the end (the operator would
	// keep the archive; the invariant check looks at done/).
	if err := os.Rename(filepath.Join(root, "done.old", "t1"), filepath.Join(root, "done", "t1")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "inbox", "t3"), []byte("content of t3"), 0o644); err != nil {
		t.Fatal(err)
	}
	c2 := claim(t, tree, "t2", "a")
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t2", Token: c2.Token}); err != nil {
		t.Fatal(err)
	}
	fileAt(t, tree, "t2", record.Done)
	if _, err := os.Lstat(filepath.Join(root, "done.old", "t2")); err == nil {
		t.Errorf("t2 completed into done.old/, the directory moved away")
	}
	fileAt(t, tree, "t3", record.Available) // adopted from the new inbox/
	if !n.has(fence.NoticeReopened, "done") || !n.has(fence.NoticeReopened, "inbox") {
		t.Errorf("no reopened notices for done and inbox: %+v", n.list)
	}
	for _, d := range []string{"done.old", "inbox.old"} {
		if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
}

// A state directory that is gone fails the writer, as it fails Open,
// instead of working on the moved-away one.
func TestTree_MissingStateDirectory(t *testing.T) {
	tree := newTree(t)
	root := tree.Root()
	add(t, tree, "t1", 0)
	if err := os.Rename(filepath.Join(root, "claimed"), filepath.Join(root, "claimed.old")); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Claim(bg, fence.ClaimRequest{ID: "t1", Agent: "a"}); err == nil {
		t.Errorf("claim with claimed/ gone succeeded")
	}
	if err := os.Rename(filepath.Join(root, "claimed.old"), filepath.Join(root, "claimed")); err != nil {
		t.Fatal(err)
	}
	claim(t, tree, "t1", "a")
}
