package fence

import (
	"context"
	"errors"
	"testing"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// TestReplay_RebuildRefusesAMovedLog: records rebuilt from a log that has
// grown since replay read it (another host committed, on etcd) would undo
// that commit; the rebuild refuses and rewrites nothing.
func TestReplay_RebuildRefusesAMovedLog(t *testing.T) {
	tree, tokens := groupTree(t)
	ctx := context.Background()
	db, err := tree.open(false)
	if err != nil {
		t.Fatal(err)
	}
	var st *replayState
	err = db.View(func(tx journal.Tx) error {
		st = &replayState{tasks: map[string]record.Task{}, claims: map[uint64]record.Claim{}, staged: map[string]string{}}
		var rep ReplayReport
		if err := st.compareJournal(tx, &rep); err != nil {
			return err
		}
		st.lastSeq, err = lastSeq(tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Another writer commits after replay read the log.
	if _, err := tree.Complete(ctx, FencedRequest{ID: "a", Token: tokens["a"], Agent: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	db, err = tree.open(false)
	if err != nil {
		t.Fatal(err)
	}
	st.rebuild = true
	err = tree.repair(db, st)
	db.Close()
	if !errors.Is(err, ErrJournalMoved) {
		t.Fatalf("repair after the log moved: err = %v, want ErrJournalMoved", err)
	}
	v, err := tree.Show(ctx, "a")
	if err != nil || v.Task.State != record.Done {
		t.Fatalf("task a after the refused rebuild: %v, %v; want done (the later commit kept)", v.Task.State, err)
	}
}
