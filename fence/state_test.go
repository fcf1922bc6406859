package fence_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

func TestDirOf(t *testing.T) {
	for s, want := range map[record.State]fsmirror.Dir{
		record.Available: fsmirror.Available,
		record.Claimed:   fsmirror.Claimed,
		record.Done:      fsmirror.Done,
		record.Failed:    fsmirror.Failed,
	} {
		if got, err := fence.DirOf(s); got != want || err != nil {
			t.Errorf("DirOf(%q) = %q, %v; want %q", s, got, err, want)
		}
	}
	for _, s := range []record.State{"", "bogus", "Available", "inbox", "../available"} {
		if got, err := fence.DirOf(s); err == nil {
			t.Errorf("DirOf(%q) = %q, want an error", s, got)
		}
	}
}

// A commit that leaves a task in a state fencectl does not know (a damaged
// journal) names no directory: the next writer's crash finish reports it
// and leaves the file where it is, never in available/.
func TestTree_UnknownStateMovesNoFile(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	if _, err := fence.Init(root, testDefaults); err != nil {
		t.Fatal(err)
	}
	n := &notices{}
	tree, err := fence.Open(root, fence.Options{Notify: n.add})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close() // no invariant check: the journal is damaged on purpose
	add(t, tree, "t1", 0)
	claim(t, tree, "t1", "a")

	db, err := boltstore.Open(filepath.Join(root, ".fence"), journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx journal.Tx) error {
		rec, _, err := tx.Task("t1")
		if err != nil {
			return err
		}
		bad := rec
		bad.State, bad.Lease = "bogus", nil
		ev := record.Event{Time: time.Now().UTC(), Type: record.EvRevoke, Task: "t1", From: record.Claimed, To: "bogus"}
		if _, err := tx.Append(ev); err != nil {
			return err
		}
		return tx.PutTask(&rec, bad)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	add(t, tree, "t2", 0) // the next writer finishes the last commit
	fileAt(t, tree, "t1", record.Claimed)
	if _, err := os.Lstat(filepath.Join(root, "available", "t1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("available/t1: %v, want no file", err)
	}
	if !n.has(fence.NoticeNotSettled, "t1") {
		t.Errorf("notices %+v, want not_settled for t1", n)
	}
}
