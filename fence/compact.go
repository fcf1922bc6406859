package fence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Compaction keeps the journal small: the events of a finished task (done
// or failed) are folded into its final record, which the store keeps as
// the task's base (journal.Tx.Fold), and dropped. Replay starts a folded
// task from that record and folds only its later events (a requeue), so
// replay, show, log and the dependency rules read the same state as
// before; the seq of the next event and the next token stay above every
// one issued. Each commit of a compaction appends a compacted event that
// says what it folded.
//
// A finished task's claims go with its events, but the store keeps which
// task each token was issued for (journal.Tx.DeleteClaim). A token of a
// folded task is refused as before (Authorize): its last one as stale,
// with how its lease ended (the record keeps that), an earlier one as not
// held; claim --token without an id finds the task too (claimTask), never
// "never issued". And the store counts the events it drops by kind
// (journal.Tx.Dropped), so that a count of every event ever appended
// (serve's /metrics: CountEventsAfter) does not fall after a compact.

// CompactRequest asks for a compaction.
type CompactRequest struct {
	// Before: fold the tasks finished at least this long ago (record
	// Updated at or before now − Before). 0 folds every finished task.
	Before time.Duration
	// DryRun counts what would be folded and changes nothing.
	DryRun bool
	Agent  string // recorded in the compacted events, never compared
	// Progress, if set, is called after each commit with the tasks folded
	// so far and how many there are to fold.
	Progress func(done, total int)
}

// CompactReport is what a compaction folded.
type CompactReport struct {
	Tasks  int       `json:"tasks"`  // tasks whose events were folded
	Events int       `json:"events"` // events dropped (with DryRun: that would be)
	Claims int       `json:"claims"` // claim records dropped
	Cutoff time.Time `json:"cutoff"` // tasks finished at or before this were folded
	// FirstSeq and LastSeq bound the seqs of the events dropped.
	FirstSeq uint64 `json:"first_seq,omitempty"`
	LastSeq  uint64 `json:"last_seq,omitempty"`
	// BytesBefore and BytesAfter are the journal file's size (bbolt,
	// rewritten by compact); Reclaimed is false where the store gives
	// space back by itself (etcd: its own compaction and defrag).
	BytesBefore int64 `json:"bytes_before"`
	BytesAfter  int64 `json:"bytes_after"`
	Reclaimed   bool  `json:"reclaimed"`
	DryRun      bool  `json:"dry_run,omitempty"`
}

// compactBatch is how many tasks one commit folds where one writer holds
// the journal (bbolt: the events are dropped in the same commit), and
// compactBatchShared where writers commit side by side (etcd, whose
// transactions hold at most --max-txn-ops operations, 128 by default:
// the events are dropped in later commits, see dropFolded). On etcd both
// sizes halve until a commit fits.
const (
	compactBatch       = 5000
	compactBatchShared = 32
	// dropsPerItem is how many folded events a commit drops for each
	// item a housekeeping commit carries (fitting): an event costs two
	// deletes and a check, its claim two writes more, about a quarter of
	// a reap. At etcd's default limit that is 32 events a commit.
	dropsPerItem = 4
)

// foldable is a task to fold: its events up to upTo.
type foldable struct {
	id   string
	upTo uint64
}

// Compact folds the events of the tasks finished at least req.Before ago
// into their records and drops them, then has the store give the space
// back (bbolt: a rewrite of the file, journal.Reclaimer). It is a writer:
// it holds the writer's turn throughout.
func (t *Tree) Compact(ctx context.Context, req CompactRequest) (CompactReport, error) {
	if req.Before < 0 {
		return CompactReport{}, invalidValue(InputBefore, RuleRange, req.Before, "must be 0 (every finished task) or a positive duration such as 24h")
	}
	if err := ctx.Err(); err != nil {
		return CompactReport{}, err
	}
	db, err := t.open(req.DryRun)
	if err != nil {
		return CompactReport{}, err
	}
	defer db.Close()
	if !req.DryRun {
		if err := t.beginWrite(db, true); err != nil {
			return CompactReport{}, err
		}
	}
	rep := CompactReport{DryRun: req.DryRun}
	var todo []foldable
	err = db.View(func(tx journal.Tx) error {
		rep.Cutoff = tx.Now().Add(-req.Before)
		var err error
		todo, err = planCompact(tx, rep.Cutoff, req.DryRun, &rep)
		return err
	})
	if err != nil || req.DryRun {
		if req.DryRun {
			rep.Tasks = len(todo)
			rep.BytesBefore, rep.BytesAfter = journalSize(t, db), 0
		}
		return rep, err
	}
	shared := !db.Exclusive()
	size := compactBatch
	if shared {
		size = compactBatchShared
	}
	// Tasks with long histories cost more checks each: inChunks folds
	// fewer per commit when one is refused (nothing of it committed).
	err = inChunks(len(todo), size, func(lo, hi int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var got CompactReport
		var folded []foldable
		err := db.Update(func(tx journal.Tx) error {
			got, folded = CompactReport{}, folded[:0] // a store may run this more than once
			for _, f := range todo[lo:hi] {
				ok, err := foldOne(tx, f, rep.Cutoff, !shared, &got)
				if err != nil {
					return err
				}
				if ok {
					folded = append(folded, f)
				}
			}
			if len(folded) == 0 {
				return nil
			}
			_, err := tx.Append(record.Event{Time: tx.Now(), Type: record.EvCompacted, Agent: req.Agent, Reason: compactReason(len(folded), got, rep.Cutoff, shared)})
			return err
		})
		if unsynced, ok := errors.AsType[*journal.UnsyncedError](err); ok {
			rep.add(got) // in the journal all the same
			return dropError{fmt.Errorf("the fold of %d finished tasks is recorded, but %w; run compact again once the disk is sound", len(folded), unsynced)}
		}
		if err != nil {
			return fmt.Errorf("fold finished tasks: %w", err)
		}
		rep.add(got)
		crashAt("compact:after-fold")
		if shared {
			for _, f := range folded {
				if err := t.dropFolded(db, f, &rep); err != nil {
					return dropError{err}
				}
			}
		}
		if req.Progress != nil {
			req.Progress(rep.Tasks, rep.Tasks+len(todo)-hi)
		}
		return nil
	})
	if drop, ok := errors.AsType[dropError](err); ok {
		err = drop.err
	}
	if err != nil {
		return rep, err
	}
	if r, ok := db.(journal.Reclaimer); ok {
		res, err := r.Reclaim(journal.ReclaimOptions{Crash: crashAt})
		if err != nil {
			// The fold is committed; only the rewrite that gives its
			// pages back failed (a full disk): say so, as every failure
			// after a commit does.
			if rep.Tasks > 0 {
				return rep, fmt.Errorf("%w; the fold of %d tasks is recorded (their events are summaries now): only giving the journal's space back failed; run `fencectl compact` again once there is room", err, rep.Tasks)
			}
			return rep, err
		}
		rep.BytesBefore, rep.BytesAfter, rep.Reclaimed = res.Before, res.After, true
	}
	return rep, nil
}

// planCompact lists the finished tasks updated at or before cutoff that
// have events to fold, with the seq of their newest event. A dry run
// counts their events too.
func planCompact(tx journal.Tx, cutoff time.Time, count bool, rep *CompactReport) ([]foldable, error) {
	var todo []foldable
	rep.Events = 0
	err := tx.ForEachTask(func(rec record.Task) error {
		if !finished(rec) || rec.Updated.After(cutoff) {
			return nil
		}
		var upTo uint64
		n := 0
		err := tx.TaskEventsBackward(rec.ID, func(ev record.Event) (bool, error) {
			if upTo == 0 {
				upTo = ev.Seq
			}
			n++
			return count, nil
		})
		if err != nil {
			return err
		}
		if upTo != 0 {
			todo = append(todo, foldable{rec.ID, upTo})
			rep.Events += n
		}
		return nil
	})
	if !count {
		rep.Events = 0
	}
	return todo, err
}

func finished(rec record.Task) bool {
	return rec.State == record.Done || rec.State == record.Failed
}

// foldOne folds task f if it is still finished at or before cutoff with
// f.upTo its newest event (on etcd another host may have requeued it
// since the plan), and with drop also drops its events and claims.
func foldOne(tx journal.Tx, f foldable, cutoff time.Time, drop bool, got *CompactReport) (bool, error) {
	rec, ok, err := tx.Task(f.id)
	if err != nil || !ok || !finished(rec) || rec.Updated.After(cutoff) {
		return false, err
	}
	var newest uint64
	err = tx.TaskEventsBackward(f.id, func(ev record.Event) (bool, error) {
		newest = ev.Seq
		return false, nil
	})
	if err != nil || newest != f.upTo {
		return false, err
	}
	if err := tx.Fold(rec, f.upTo); err != nil {
		return false, err
	}
	got.Tasks++
	if drop {
		if _, err := dropEvents(tx, f, 0, nil, got); err != nil {
			return false, err
		}
	}
	return true, nil
}

// dropEvents drops up to limit of f's folded events and the claims their
// tokens name, but those in gone (an earlier commit dropped them); it
// reports how many it dropped in got and returns the tokens of the claims.
func dropEvents(tx journal.Tx, f foldable, limit int, gone map[uint64]bool, got *CompactReport) (map[uint64]bool, error) {
	evs, err := tx.DropEvents(f.id, f.upTo, limit)
	if err != nil {
		return nil, err
	}
	tokens := map[uint64]bool{}
	for _, ev := range evs {
		got.Events++
		if got.FirstSeq == 0 || ev.Seq < got.FirstSeq {
			got.FirstSeq = ev.Seq
		}
		got.LastSeq = max(got.LastSeq, ev.Seq)
		if ev.Token != 0 && !gone[ev.Token] && !tokens[ev.Token] {
			tokens[ev.Token] = true
			if err := tx.DeleteClaim(ev.Token, f.id); err != nil {
				return nil, err
			}
			got.Claims++
		}
	}
	return tokens, nil
}

// dropFolded drops the events of a folded task a few at a time, each
// bunch in a commit of its own (etcd bounds a transaction): replay skips
// the folded ones still there, so every step leaves the journal whole.
// How many a commit drops follows what the tree has learned a
// housekeeping commit carries (inChunksLearned): dropsPerItem events an
// item, down to one event a commit.
func (t *Tree) dropFolded(db journal.Store, f foldable, rep *CompactReport) error {
	gone := map[uint64]bool{} // tokens whose claims are dropped
	err := t.inChunksLearned(func(limit int) (bool, error) {
		n := 1
		if limit > 1 {
			n = limit * dropsPerItem
		}
		var got CompactReport
		var tokens map[uint64]bool
		err := db.Update(func(tx journal.Tx) error {
			got = CompactReport{}
			var err error
			tokens, err = dropEvents(tx, f, n, gone, &got)
			return err
		})
		if err != nil {
			return false, err
		}
		maps.Copy(gone, tokens)
		rep.add(CompactReport{Events: got.Events, Claims: got.Claims, FirstSeq: got.FirstSeq, LastSeq: got.LastSeq})
		return got.Events == n, nil
	})
	if err != nil {
		return fmt.Errorf("drop the folded events of %s: %w", f.id, err)
	}
	return nil
}

// dropError is a failure to drop folded events, carried out of the
// folding's inChunks as is: inChunks would take a refusal as too large
// for the fold, which has committed, and fold the same tasks again.
type dropError struct{ err error }

func (e dropError) Error() string { return e.err.Error() }

// add counts what one commit folded into the report.
func (r *CompactReport) add(got CompactReport) {
	r.Tasks += got.Tasks
	r.Events += got.Events
	r.Claims += got.Claims
	if got.FirstSeq != 0 && (r.FirstSeq == 0 || got.FirstSeq < r.FirstSeq) {
		r.FirstSeq = got.FirstSeq
	}
	r.LastSeq = max(r.LastSeq, got.LastSeq)
}

// compactReason is what a compacted event says.
func compactReason(tasks int, got CompactReport, cutoff time.Time, shared bool) string {
	s := fmt.Sprintf("folded %d finished task(s) (finished at or before %s)", tasks, cutoff.UTC().Format(time.RFC3339))
	if !shared && got.Events > 0 {
		s += fmt.Sprintf(": %d event(s), seq %d-%d, and %d claim record(s) dropped", got.Events, got.FirstSeq, got.LastSeq, got.Claims)
	}
	return s
}

// journalSize is the journal file's size, if the store keeps one (0 else).
func journalSize(t *Tree, db journal.Store) int64 {
	if _, ok := db.(journal.Reclaimer); !ok {
		return 0
	}
	if fi, err := os.Stat(t.store.Path(t.metaDir)); err == nil {
		return fi.Size()
	}
	return 0
}

// endedClaim stands in for the claim record of token on a folded task:
// if token is the one whose lease ended last, the record still says how
// (Last), so a stale token is explained and a retry of the call that
// ended it still answers success. nil otherwise.
func endedClaim(rec record.Task, token uint64) *record.Claim {
	if rec.Last == nil || rec.Last.Token != token || token == 0 {
		return nil
	}
	end := *rec.Last
	return &record.Claim{Token: token, Task: rec.ID, Agent: end.Agent, Ended: &end}
}

// claimTask is the task token was issued for, for claim --token without an
// id: its claim's (c, if known), else the one compaction kept when it
// dropped the claim. A token neither names was never issued.
func claimTask(tx journal.Tx, token uint64, c record.Claim, known bool) (string, error) {
	if known {
		return c.Task, nil
	}
	id, folded, err := tx.FoldedToken(token)
	if err != nil {
		return "", err
	}
	if !folded {
		return "", &StaleTokenError{Reason: ReasonNotHeld, Yours: token}
	}
	return id, nil
}

// EventKind is an event's type and the states it moved its task between
// (journal.EventKind): what CountPage.Dropped counts by.
type EventKind = journal.EventKind

// CountPage is a page of the log for a count of every event ever
// appended (serve's /metrics): the events after a seq, heartbeats
// included, and, read in the same transaction, how many events of each
// kind compaction has dropped from the log. A count of the log alone
// falls after a compact.
type CountPage struct {
	EventPage
	Dropped map[EventKind]uint64
}

// CountEventsAfter reads up to limit events (0: all) whose sequence number
// is above after, oldest first, and the count of dropped events, in one
// read transaction.
func (t *Tree) CountEventsAfter(ctx context.Context, after uint64, limit int) (CountPage, error) {
	if limit < 0 {
		return CountPage{}, invalidValue(InputLimit, RuleRange, limit, "must be 0 (all) or more")
	}
	var p CountPage
	err := t.read(ctx, func(tx journal.Tx, _ time.Time) error {
		p = CountPage{EventPage: EventPage{Last: after}} // a store may run this more than once
		var err error
		if p.Dropped, err = tx.Dropped(); err != nil {
			return err
		}
		if after == math.MaxUint64 {
			return nil // nothing follows the last seq there can be (after+1 would wrap to the start)
		}
		return tx.Events(after+1, func(ev record.Event) (bool, error) {
			p.Last = ev.Seq
			p.Events = append(p.Events, ev)
			return limit == 0 || len(p.Events) < limit, nil
		})
	})
	return p, err
}
