package fence

import (
	"fmt"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Moves without directory fsyncs, redone after a reboot (bbolt trees).
//
// The journal is the only durable truth; the state directories mirror it.
// A claim, complete, release, fail, reap, revoke or requeue moves a file
// whose content is already durable, after a commit that says where it
// goes: if a power loss undoes that rename, nothing is lost that the
// journal cannot tell. So on a tree with a lease clock (a bbolt journal on
// this host) those moves skip their two directory fsyncs
// (fsmirror.Batch.MoveLazy), and the first writer of every boot, before
// anything else, puts every task's file where the journal says
// (reconcileAfterBoot). A reboot is a new boot id in .fence/boot (see
// leaseclock.go); a tree carried to another host meets another boot id
// and is reconciled too. Moves that place content that exists nowhere
// else (add, inbox adoption, fenced outputs) keep their fsyncs.
//
// Within one boot a rename is seen by every process at once, durable or
// not; only a power loss (or a kernel crash) can take it back, and that
// is always a new boot.

// lazyMoves reports whether this tree's state moves may skip their
// directory fsyncs: only where a reboot is noticed, so they are redone.
func (t *Tree) lazyMoves() bool { return t.leaseClock != nil }

// reconcileAfterBoot moves every task file that is not where the journal
// says, and fsyncs the directories it moved between. A file in more than
// one directory, or one the journal does not know, is left for `replay`,
// which reports and repairs those.
func (t *Tree) reconcileAfterBoot(db journal.Store) error {
	crashAt("boot:before-reconcile")
	// The first writer of the boot holds the lock: nothing moves while
	// the directories are listed beside the journal's read.
	scan := scanInBackground(t.mirror, "left for replay")
	want := map[string]fsmirror.Dir{}
	err := db.View(func(tx journal.Tx) error {
		clear(want)
		return tx.ForEachTask(func(rec record.Task) error {
			if d, err := DirOf(rec.State); err == nil {
				want[rec.ID] = d
			}
			return nil
		})
	})
	sc, scanErr := scan()
	if err != nil {
		return err
	}
	if err := scanErr; err != nil {
		return err
	}
	b := t.mirror.NewBatch()
	moved := 0
	for _, id := range sc.order {
		dirs := sc.where[id]
		to, known := want[id]
		if !known || len(dirs) != 1 || dirs[0] == to {
			continue
		}
		if err := b.Move(id, dirs[0], to); err != nil {
			t.notify(NoticeNotSettled, id, err.Error()+"; left for replay")
			continue
		}
		moved++
	}
	if err := b.Sync(); err != nil {
		return err
	}
	if moved > 0 {
		t.notify(NoticeSettled, "", fmt.Sprintf("after a reboot, moved %d task files back where the journal says (moves a power loss undid)", moved))
	}
	return nil
}
