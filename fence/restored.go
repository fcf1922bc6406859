package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// AfterRestore is for a tree put back from a backup whole: the journal
// and the token ceiling's files together (a tar of the tree, a volume
// snapshot; on etcd, a snapshot restored with a copy of .fence and
// .fence-tokens). Nothing left on disk then knows the tokens issued after
// the backup, and agents may hold them: the witness (journal/witness.go)
// came back with the journal it would have caught. AfterRestore moves the
// token counter above the restored ceiling and above the clock plus a
// ceiling step (journal.CeilingStep, about 71 minutes of tokens), which
// is above every token issued since by a host whose clock was not ahead
// of this one's: a ceiling that lost history raised stood at most a step
// above the token that raised it, and that token at most at its clock.
// It returns the token counter from which the next token counts up.
func (t *Tree) AfterRestore(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	db, err := t.open(false)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	// A garbled copy still leaves the journal's ceiling and the clock.
	onFile, _, _, _ := journal.ReadCeilingWitness(t.metaDir)
	var counter uint64
	err = db.Update(func(tx journal.Tx) error {
		floor := max(onFile, tx.Ceiling(), uint64(tx.Now().UnixMicro())+journal.CeilingStep)
		if err := tx.RaiseCounter(floor); err != nil {
			return err
		}
		counter = tx.LastToken()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("raise the token counter after a restore: %w", err)
	}
	return counter, nil
}

// A journal restored alone (journal.db put back from a backup, an etcd
// cluster restored from a snapshot, the ceiling's files left as they
// were) holds the leases of the day of the backup. A lease that ended
// since (released, revoked, reaped, and the task done by another agent)
// is current there again, and the agent that lost it, back with its old
// token, would be taken for the holder. The journal cannot tell such a
// lease from one that lived on, so the first write that finds the journal
// behind the tokens it issued (journal.Tx.LostTokens) ends them all
// before any step is judged (endRestoredLeases): released, no attempt
// counted, as when a holder died before it started. A holder that was
// still working is refused at its next step and its task is claimed
// again; none is taken for a holder it is not.

// ReasonJournalRestored is the reason of the release of every lease a
// journal held when it was found restored from a backup.
const ReasonJournalRestored = "journal restored from a backup"

// LostByRestore is StaleTokenError.LostBy for a lease ended because the
// journal was found restored from a backup.
const LostByRestore = "ended by a restore"

// errTokensLost rolls back a group's transaction that found the journal
// behind the tokens it issued: its leases are ended first.
var errTokensLost = errors.New("the journal is behind the tokens it issued (restored from a backup, or an older copy put in its place) and its leases could not all be ended: nothing was done; run `fencectl replay`, then try again")

// restoredChunk is how many leases one commit of endRestoredLeases first
// ends on a store whose transactions are bounded (etcd's --max-txn-ops);
// inChunks halves it until a commit fits.
const restoredChunk = sharedAdoptChunk

// endRestoredLeases releases every lease of a journal that lost tokens it
// issued, moves their files to available/, and then raises the token
// counter above every token the ceiling's files bound, which ends the
// journal's being behind. The counter moves last: a writer cut short
// before it leaves the journal behind, and the next one ends the rest.
func (t *Tree) endRestoredLeases(db journal.Store) error {
	var (
		ids  []string
		last uint64
	)
	err := db.View(func(tx journal.Tx) error {
		ids, last = ids[:0], tx.LastToken()
		return tx.Leases(func(id string) error {
			ids = append(ids, id)
			return nil
		})
	})
	if err != nil {
		return err
	}
	var ended []record.Event
	err = inChunks(len(ids), restoredChunk, func(lo, hi int) error {
		var evs []record.Event
		err := db.Update(func(tx journal.Tx) error {
			evs = evs[:0]
			now := tx.Now()
			for _, id := range ids[lo:hi] {
				rec, ok, err := tx.Task(id)
				if err != nil {
					return err
				}
				// A lease above last was issued after the counter was
				// raised (by another host that ended these first).
				if !ok || rec.State != record.Claimed || rec.Lease == nil || rec.Lease.Token > last {
					continue
				}
				ev := endEvent(record.EvRelease, rec, record.Available, "", ReasonJournalRestored, now)
				if _, ev, err = commit(tx, &rec, ev); err != nil {
					return err
				}
				evs = append(evs, ev)
			}
			if len(evs) == 0 {
				return errNothingWritten
			}
			return nil
		})
		if errors.Is(err, errNothingWritten) {
			return nil
		}
		if err != nil {
			return err
		}
		ended = append(ended, evs...)
		_, err = t.mirrorEvents(evs, false)
		return err
	})
	if err != nil {
		return err
	}
	floor := last + 1
	if onFile, found, _ := journal.ReadCeiling(t.metaDir); found {
		floor = max(floor, onFile+1)
	}
	if err := db.Update(func(tx journal.Tx) error { return tx.RaiseCounter(floor) }); err != nil {
		return fmt.Errorf("raise the token counter of a restored journal: %w", err)
	}
	for _, ev := range ended {
		t.notify(NoticeReaped, ev.Task, fmt.Sprintf("held by %s with token %d when the journal was found restored from a backup: released, no attempt counted; that token is refused from now on", ev.Agent, ev.Token))
	}
	t.notify(NoticeWarning, t.store.Path(t.metaDir), fmt.Sprintf("the journal is behind the tokens it issued (restored from a backup, or an older copy put in its place): ended the %d leases it held, and new tokens start above every token issued; work done since the backup may be redone (`fencectl replay` puts task files where this journal says)", len(ended)))
	return nil
}
