package fence_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// init on a directory that lost its journal and has no task files left
// starts above the ceiling's files, even with the clock behind.
func TestInit_AfterLostJournalStartsAboveCeiling(t *testing.T) {
	setNow(t, base.Add(time.Hour))
	root := filepath.Join(t.TempDir(), "tree")
	if _, err := fence.InitTree(root, testDefaults, fence.Options{Clock: testClock}); err != nil {
		t.Fatal(err)
	}
	tree, err := fence.Open(root, fence.Options{Clock: testClock})
	if err != nil {
		t.Fatal(err)
	}
	add(t, tree, "t1", 0)
	old := claim(t, tree, "t1", "a")
	tree.Close()
	for _, p := range []string{filepath.Join(root, ".fence"), filepath.Join(root, "claimed", "t1")} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	setNow(t, base)
	if res, err := fence.InitTree(root, testDefaults, fence.Options{Clock: testClock}); err != nil || !res.Created {
		t.Fatalf("Init: %v, %v", res.Created, err)
	}
	tree, err = fence.Open(root, fence.Options{Clock: testClock})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	add(t, tree, "t2", 0)
	if c := claim(t, tree, "t2", "b"); c.Token <= old.Token {
		t.Fatalf("token %d after init with the clock behind, want above %d", c.Token, old.Token)
	}
}
