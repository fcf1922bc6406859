package fence

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// adoptInbox turns the valid files in inbox/ into available tasks, in one
// commit. Users drop files there Maildir-style (write elsewhere on the same
// filesystem, rename in), so a listed file is complete. Entries that cannot
// be adopted are reported and left where they are; nothing is deleted.
// inbox/ is normally empty, so this costs one directory read per writer.
//
// Nothing in inbox/ may stop the writer that looks at it (a heartbeat
// above all), so adoption never fails the group: every problem is a
// notice. Each file is first renamed into .fence/tmp (fsmirror.Batch.
// Adopt), before the commit: that rename is the test that the file can
// leave inbox/ at all (EPERM in a sticky drop box owned by another user,
// EXDEV when inbox/ is a mount point), and a file that fails it is
// reported, left in inbox/ and never adopted. After the commit the staged
// file moves into available/ like an added one; a crash before the commit
// leaves it staged for the next writer to put back (restoreAdoptions).
func (t *Tree) adoptInbox(db journal.Store) {
	valid, rejected, more, err := t.mirror.ScanInbox(adoptPerTurn)
	if err != nil {
		t.notify(NoticeWarning, string(fsmirror.Inbox), err.Error()+"; nothing adopted")
		return
	}
	for _, r := range rejected {
		t.notify(NoticeInboxRejected, r.Name, r.Why)
	}
	t.adoptIDs(db, valid)
	if more {
		t.notify(NoticeWarning, string(fsmirror.Inbox), fmt.Sprintf("inbox/ holds more files than a command adopts at once (%d): the next writers adopt the rest, %d each", adoptPerTurn, adoptPerTurn))
		if trouble := t.mirror.InboxCursorTrouble(); trouble != "" {
			t.notify(NoticeWarning, string(fsmirror.Inbox), trouble+": each command reads inbox/ from the same place, and files behind those left there may never be adopted; remove it (fencectl makes it again)")
		}
	}
}

// adoptPerTurn bounds the inbox files one writer adopts while it holds
// the tree's lock. All at once, a drop of a million files kept every other
// writer (and reader) out for minutes, took 2.4 GB, and, through the
// daemon, more descriptors than it had (each file is held open until it
// is placed), which stopped the daemon (found from outside). A bound
// keeps a writer's turn to tens of milliseconds, and its notices (one a
// file) to a few hundred; every writer after it adopts the next files, so
// a claim still finds new work at once.
const adoptPerTurn = 256

// claimWrite returns how a claim of ids (none: the next ready tasks) is
// written: adopting inbox/ first when the claim may take what is there
// (it looks for any ready task, or names one whose file is in inbox/),
// and otherwise as every other writer, which adopts only after a commit
// of its own: a claim refused for a name it does not hold changes
// nothing. (A claim that looks for work and finds none after adopting
// still leaves the adopted tasks: it asked for new work, and that is
// where new work comes from.)
func (t *Tree) claimWrite(ids ...string) func(context.Context, string, func(journal.Tx, time.Time) ([]record.Event, error)) ([]record.Event, bool, error) {
	if len(ids) == 0 || slices.ContainsFunc(ids, func(id string) bool {
		in, _ := t.mirror.Exists(fsmirror.Inbox, id)
		return in
	}) {
		return t.writeAdopting
	}
	return t.write
}

// sharedAdoptChunk is how many files a commit first adopts on a store
// whose transactions are bounded (etcd: about six operations a file, 128
// a transaction by default); it halves until a commit fits.
const sharedAdoptChunk = 64

// adoptIDs adopts the inbox files valid names: in one commit, or, where
// that is too large for one transaction of the store (etcd's
// --max-txn-ops: a few hundred files dropped at once), in chunks of the
// largest size that fit. Each refused commit stages its files and puts
// them back first, so the size is learned once, not per chunk: halving
// every chunk on its own made 5,000 files 14.6 s of renames.
func (t *Tree) adoptIDs(db journal.Store, valid []string) {
	size := len(valid)
	if !db.Exclusive() {
		size = min(size, sharedAdoptChunk)
	}
	_ = inChunks(len(valid), size, func(lo, hi int) error { return t.adoptChunk(db, valid[lo:hi]) })
}

// adoptChunk adopts the inbox files valid names in one commit. It
// returns journal.ErrTooLarge if the store refused the commit as too
// large (the files are back in inbox/); every other problem is a notice.
func (t *Tree) adoptChunk(db journal.Store, valid []string) error {
	b := t.mirror.NewBatch()
	var evs []record.Event
	staged := map[string]string{} // task id → staged name
	err := db.Update(func(tx journal.Tx) error {
		evs = nil // a store may run this more than once: each run afresh
		d, err := tx.Defaults()
		if err != nil {
			return err
		}
		now := tx.Now()
		for _, id := range valid {
			if _, known, err := tx.Task(id); err != nil {
				return err
			} else if known {
				t.notify(NoticeInboxDuplicate, id, "a task with this id already exists; left in inbox/ (rename it to adopt it)")
				continue
			}
			if dir, _, err := t.mirror.Locate(id); err == nil && dir != fsmirror.Inbox {
				t.notify(NoticeInboxDuplicate, id, "a file "+string(dir)+"/"+id+" that the journal does not know has this id; left in inbox/")
				continue
			}
			name, ok := staged[id] // staged by an earlier run of this function
			if !ok {
				name, err = b.Adopt(fsmirror.Inbox, id)
				if errors.Is(err, fs.ErrNotExist) {
					continue // taken away meanwhile
				}
				if hl, ok := errors.AsType[*fsmirror.HardLinkedError](err); ok {
					t.notify(NoticeInboxRejected, id, hl.Error())
					continue
				}
				if oo, ok := errors.AsType[*fsmirror.OtherOwnerError](err); ok {
					t.notify(NoticeInboxRejected, id, oo.Error())
					continue
				}
				if bw, ok := errors.AsType[*fsmirror.BeingWrittenError](err); ok {
					t.notify(NoticeInboxRejected, id, bw.Error())
					continue
				}
				if err != nil {
					t.notify(NoticeInboxUnmovable, id, err.Error()+"; left in inbox/, not adopted (inbox/ must be a plain directory on the tree's file system that fencectl may move files out of)")
					continue
				}
				staged[id] = name
			}
			ev := adoptEvent(id, fsmirror.Inbox, record.Available, d.MaxAttempts, now)
			ev.Staged = name
			if _, ev, err = commit(tx, nil, ev); err != nil {
				return err
			}
			evs = append(evs, ev)
		}
		if len(evs) == 0 {
			// Every file was left (rejected, still being written, taken
			// away): nothing to commit, not even an empty transaction,
			// which would move the journal of a claim that then found
			// nothing (a refusal).
			return errNothingWritten
		}
		// The staged names durable before the commit that names them
		// (their contents were synced as they were staged).
		if err := b.SyncStaged(); err != nil {
			return err
		}
		crashAt("adopt:before-commit")
		return nil
	})
	if errors.Is(err, errNothingWritten) {
		return nil
	}
	if unsynced, ok := errors.AsType[*journal.UnsyncedError](err); ok {
		// Committed all the same: every reader sees it, so the files are
		// placed, not put back in inbox/.
		t.notify(NoticeWarning, string(fsmirror.Inbox), "adopted, but "+unsynced.Error())
		err = nil
	}
	if err != nil {
		for id, name := range staged {
			if perr := t.mirror.MoveFrom(fsmirror.Staging, name, fsmirror.Inbox, id); perr != nil {
				t.notify(NoticeWarning, id, perr.Error())
			}
		}
		if errors.Is(err, journal.ErrTooLarge) && len(valid) > 1 {
			return err
		}
		t.notify(NoticeWarning, string(fsmirror.Inbox), "adoption not committed: "+err.Error()+"; the files are back in inbox/")
		return nil
	}
	crashAt("adopt:after-commit")
	moved := true
	var adopted []string
	for i, m := range movesOf(evs) {
		if i == 1 {
			crashAt("adopt:mid")
		}
		if err := t.place(b, m); err != nil {
			moved = false
			t.notify(NoticeNotMoved, m.id, err.Error()+"; the task is available, its file stays in "+string(fsmirror.Staging)+" until a writer moves it")
			continue
		}
		adopted = append(adopted, m.id)
	}
	for _, id := range adopted {
		t.notify(NoticeAdopted, id, "inbox/"+id+" is now an available task")
	}
	if err := b.Sync(); err != nil {
		moved = false
		t.notify(NoticeWarning, string(fsmirror.Inbox), err.Error())
	}
	// Its moves are done: so says the mark, as after any commit, or the
	// next writer would settle this commit again and write the mark
	// itself, a refused step included (a refusal writes nothing).
	if moved && db.Exclusive() {
		if head, err := db.Head(); err == nil {
			t.mirrored(head)
		}
	}
	return nil
}

// restoreAdoptions deals with files an adoption staged (see adoptInbox)
// that are still in .fence/tmp: a process died between staging and
// committing (the journal does not know the task: back to inbox/), or
// between committing and moving (the task's file goes where its record
// says). It runs under the lock, after settle, and reports what it did.
func (t *Tree) restoreAdoptions(db journal.Store, names []string) {
	for _, name := range names {
		id := strings.TrimPrefix(name, fsmirror.AdoptPrefix)
		if fsmirror.ValidateID(id) != nil {
			continue
		}
		var rec record.Task
		var known bool
		if err := db.View(func(tx journal.Tx) (err error) {
			rec, known, err = tx.Task(id)
			return err
		}); err != nil {
			t.notify(NoticeWarning, name, err.Error())
			continue
		}
		var err error
		switch {
		case !known:
			err = t.mirror.MoveFrom(fsmirror.Staging, name, fsmirror.Inbox, id)
			if err == nil {
				t.notify(NoticeSettled, id, "put back into inbox/ a file that an interrupted adoption left in "+string(fsmirror.Staging))
			}
		default:
			var to fsmirror.Dir
			if to, err = DirOf(rec.State); err != nil {
				break // reported below; the staged file stays
			}
			if ok, _ := t.mirror.Exists(to, id); ok {
				// Adopted and in place: the staged file is a second copy.
				_, err = t.mirror.Quarantine(fsmirror.Staging, name)
				break
			}
			err = t.mirror.MoveFrom(fsmirror.Staging, name, to, id)
			if err == nil {
				t.notify(NoticeSettled, id, "finished the move to "+string(to)+"/ that an interrupted adoption left undone")
			}
		}
		if err != nil {
			t.notify(NoticeNotMoved, id, err.Error())
		}
	}
}

func adoptEvent(id string, from fsmirror.Dir, to record.State, maxAttempts int, now time.Time) record.Event {
	return record.Event{Time: now, Type: record.EvAdopt, Task: id, To: to, MaxAttempts: maxAttempts, Source: string(from)}
}
