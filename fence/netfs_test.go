package fence_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal/record"
)

// linkBack gives task id's file in state from a second name in state to:
// what a move by link (NFS) leaves when its process dies between the link
// and the unlink of the old name.
func linkBack(t *testing.T, tree *fence.Tree, id string, from, to record.State) {
	t.Helper()
	if err := os.Link(tree.Path(id, from), tree.Path(id, to)); err != nil {
		t.Fatal(err)
	}
}

// The next writer finishes a move by link that a crash cut short: the old
// name goes, the file stays where the journal says, nothing is quarantined.
func TestTree_SettleRemovesOldNameOfLinkMove(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	claim(t, tree, "t1", "a")
	linkBack(t, tree, "t1", record.Claimed, record.Available)
	if err := os.Remove(filepath.Join(tree.Root(), ".fence", fsmirror.MarkName)); err != nil {
		t.Fatal(err)
	}
	notes := nextWriter(t, tree)
	if !notes.has(fence.NoticeSettled, "t1") {
		t.Errorf("no settled notice for t1: %+v", notes.list)
	}
	fileAt(t, tree, "t1", record.Claimed)
	if _, err := os.Lstat(tree.Path("t1", record.Available)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old name available/t1 still there: %v", err)
	}
	quarantineEmpty(t, tree)
}

// replay tells a second name of the same file (stale_link: removed) from
// a second copy (duplicate: quarantined), for known and unknown tasks.
func TestTree_ReplayRemovesStaleLink(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	add(t, tree, "t2", 0)
	add(t, tree, "t3", 0)
	claim(t, tree, "t1", "a")
	add(t, tree, "t4", 0) // so that t1's claim is not the last commit
	linkBack(t, tree, "t1", record.Claimed, record.Available)
	if err := os.WriteFile(tree.Path("t2", record.Done), []byte("another file"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Misplaced (journal: available) and linked in two wrong places.
	if err := os.Rename(tree.Path("t3", record.Available), tree.Path("t3", record.Done)); err != nil {
		t.Fatal(err)
	}
	linkBack(t, tree, "t3", record.Done, record.Failed)
	// A file the journal does not know, under two names.
	if err := os.WriteFile(tree.Path("stray", record.Done), []byte("content of stray"), 0o644); err != nil {
		t.Fatal(err)
	}
	linkBack(t, tree, "stray", record.Done, record.Failed)

	check, err := tree.Replay(bg, true)
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ task, dir string }
	got := map[key]fence.FindingKind{}
	for _, f := range check.Findings {
		got[key{f.Task, f.Dir}] = f.Kind
	}
	want := map[key]fence.FindingKind{
		{"t1", "available"}: fence.FindingStaleLink,
		{"t2", "done"}:      fence.FindingDuplicate,
		{"t3", "done"}:      fence.FindingMisplaced,
		{"t3", "failed"}:    fence.FindingStaleLink,
		{"stray", "done"}:   fence.FindingUnknownFile,
		{"stray", "failed"}: fence.FindingStaleLink,
	}
	if len(got) != len(want) || len(check.Findings) != len(want) {
		t.Errorf("replay --check findings = %v, want %v", got, want)
	}
	for k, kind := range want {
		if got[k] != kind {
			t.Errorf("finding for %s in %s/ = %q, want %q", k.task, k.dir, got[k], kind)
		}
	}

	rep, err := tree.Replay(bg, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unfixed() != 0 {
		t.Errorf("replay left %+v", rep.Findings)
	}
	fileAt(t, tree, "t1", record.Claimed)
	fileAt(t, tree, "t2", record.Available)
	fileAt(t, tree, "t3", record.Available)
	fileAt(t, tree, "stray", record.Done)
	q, err := os.ReadDir(filepath.Join(tree.Root(), ".fence", "quarantine"))
	if err != nil || len(q) != 1 {
		t.Errorf("quarantine = %v, %v; want only the other file of t2", names(q), err)
	}
	if again, err := tree.Replay(bg, true); err != nil || len(again.Findings) != 0 {
		t.Errorf("replay --check after replay = %+v, %v", again.Findings, err)
	}
}

// recover keeps one name of a file found under several, and quarantines
// only real second copies.
func TestRecover_RemovesStaleLink(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	add(t, tree, "t2", 0)
	linkBack(t, tree, "t1", record.Available, record.Done)
	// Same content, but another file: a real second copy.
	if err := os.WriteFile(tree.Path("t2", record.Failed), []byte("content of t2"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := tree.Root()
	if err := os.Remove(filepath.Join(root, ".fence", "journal.db")); err != nil {
		t.Fatal(err)
	}
	rep, err := fence.Recover(root, testDefaults, fence.Options{Clock: testClock})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]fence.FindingKind{}
	for _, f := range rep.Findings {
		kinds[f.Task] = f.Kind
		if !f.Fixed {
			t.Errorf("recover did not fix %+v", f)
		}
	}
	if kinds["t1"] != fence.FindingStaleLink || kinds["t2"] != fence.FindingDuplicate || len(kinds) != 2 {
		t.Errorf("recover findings = %v, want t1 stale_link, t2 duplicate", kinds)
	}
	fileAt(t, tree, "t1", record.Done)
	fileAt(t, tree, "t2", record.Failed)
	if _, err := os.Lstat(tree.Path("t1", record.Available)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("available/t1 still there: %v", err)
	}
	q, err := os.ReadDir(filepath.Join(root, ".fence", "quarantine"))
	if err != nil || len(q) != 1 {
		t.Errorf("quarantine = %v, %v; want only the copy of t2", names(q), err)
	}
}

func quarantineEmpty(t *testing.T, tree *fence.Tree) {
	t.Helper()
	q, err := os.ReadDir(filepath.Join(tree.Root(), ".fence", "quarantine"))
	if err != nil || len(q) != 0 {
		t.Errorf("quarantine = %v, %v; want empty", names(q), err)
	}
}
