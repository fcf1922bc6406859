package fence

import (
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
)

// adoptInbox turns the valid files in inbox/ into available tasks, in one
// commit. Users drop files there Maildir-style (write elsewhere on the same
// filesystem, rename in), so a listed file is complete. Entries that cannot
// be adopted are reported and left where they are; nothing is deleted.
// inbox/ is normally empty, so this costs one directory read per writer.
func (t *Tree) adoptInbox(db *journal.DB) error {
	valid, rejected, err := t.mirror.ScanInbox()
	if err != nil {
		return err
	}
	for _, r := range rejected {
		t.notify("inbox_rejected", r.Name, r.Why)
	}
	if len(valid) == 0 {
		return nil
	}
	var evs []journal.Event
	err = db.Update(func(tx *journal.Tx) error {
		d, err := tx.Defaults()
		if err != nil {
			return err
		}
		now := Now()
		for _, id := range valid {
			if _, known, err := tx.Task(id); err != nil {
				return err
			} else if known {
				t.notify("inbox_duplicate", id, "a task with this id already exists; left in inbox/ (rename it to adopt it)")
				continue
			}
			_, ev, err := commit(tx, nil, adoptEvent(id, fsmirror.Inbox, Available, d.MaxAttempts, now))
			if err != nil {
				return err
			}
			evs = append(evs, ev)
		}
		return nil
	})
	if err != nil {
		return err
	}
	crashAt("adopt:after-commit")
	b := t.mirror.NewBatch()
	for i, m := range movesOf(evs) {
		if i == 1 {
			crashAt("adopt:mid")
		}
		if err := t.place(b, m); err != nil {
			return err
		}
		t.notify("adopted", m.id, "inbox/"+m.id+" is now an available task")
	}
	return b.Sync()
}

func adoptEvent(id string, from fsmirror.Dir, to State, maxAttempts int, now time.Time) journal.Event {
	return journal.Event{Time: now, Type: journal.EvAdopt, Task: id, To: to, MaxAttempts: maxAttempts, Source: string(from)}
}
