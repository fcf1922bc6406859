package fence

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Watching a tree without polling: Watch tells a reader that the journal
// changed (inotify on a bbolt journal, an etcd watch on an etcd one: the
// store's own Watch, the one the lease keeper uses), EventsAfter then
// reads what is new from a sequence number on, and Gauges reads what a
// dashboard or a metrics scrape shows. None of them holds a lock between
// calls: each read takes the shared lock for one transaction.

// Changes is a watch on a tree's journal: C is signalled, coalesced,
// after every commit by any process; the receiver re-reads what it cares
// about. A signal may come with nothing new (a commit that only renewed
// a lease, or a write of the store's own): a reader must not assume one
// event per signal.
type Changes struct{ w journal.Watcher }

// Watch starts watching the tree's journal. A non-nil error is a
// *WatchError (no inotify instance left, say): the caller falls back to
// reading on a timer, and says so.
func (t *Tree) Watch() (*Changes, error) {
	w, err := t.store.Watch(t.metaDir)
	if err != nil {
		return nil, &WatchError{Err: err}
	}
	return &Changes{w: w}, nil
}

// C is signalled after the journal changed.
func (c *Changes) C() <-chan struct{} { return c.w.C() }

// Close stops watching. Safe to call twice.
func (c *Changes) Close() error { return c.w.Close() }

// EventPage is one read of EventsAfter: the events, oldest first, and
// Last, the sequence number of the newest event read, kept or not (a
// skipped heartbeat moves it too): the next page starts after Last.
type EventPage struct {
	Events []record.Event
	Last   uint64
}

// EventsAfter reads up to limit events (0: all) whose sequence number is
// above after, oldest first, leaving heartbeats out unless heartbeats is
// set (they still move Last on, and count towards limit, so that a page
// is bounded whatever it keeps).
func (t *Tree) EventsAfter(ctx context.Context, after uint64, limit int, heartbeats bool) (EventPage, error) {
	if limit < 0 {
		return EventPage{}, invalidValue(InputLimit, RuleRange, limit, "must be 0 (all) or more")
	}
	var p EventPage
	err := t.read(ctx, func(tx journal.Tx, _ time.Time) error {
		p = EventPage{Last: after} // a store may run this more than once
		read := 0
		if after == math.MaxUint64 {
			return nil // nothing follows the last seq there can be (after+1 would wrap to the start)
		}
		return tx.Events(after+1, func(ev record.Event) (bool, error) {
			read++
			p.Last = ev.Seq
			if heartbeats || ev.Type != record.EvHeartbeat {
				p.Events = append(p.Events, ev)
			}
			return limit == 0 || read < limit, nil
		})
	})
	return p, err
}

// Gauges is what a tree holds at one moment, for a dashboard or a
// metrics scrape.
type Gauges struct {
	Now    time.Time // the store's time of the read (expiry is judged by it)
	Counts map[record.State]int
	// LeaseLeft is the time left of every lease, negative once expired
	// and not yet reaped, in deadline order.
	LeaseLeft []time.Duration
	// OldestAvailable is when the oldest available task was made (zero if
	// none is available).
	OldestAvailable time.Time
	// LastSeq is the sequence number of the newest event (0: none yet).
	LastSeq   uint64
	LastToken uint64
}

// Gauges reads the counts, the leases' time left, the oldest available
// task and the head of the log in one read transaction. It reads every
// live lease, and the first available task of each priority where the
// store can find those alone (journal.ReadyHeads; otherwise every
// available task's record): O(claimed + priorities).
func (t *Tree) Gauges(ctx context.Context) (Gauges, error) {
	var g Gauges
	err := t.read(ctx, func(tx journal.Tx, now time.Time) error {
		g = Gauges{Now: now, Counts: tx.Counts(), LastToken: tx.LastToken()}
		if err := tx.Leases(func(id string) error {
			rec, ok, err := tx.Task(id)
			if err != nil || !ok || rec.Lease == nil {
				return err
			}
			g.LeaseLeft = append(g.LeaseLeft, rec.Lease.Deadline.Sub(now))
			return nil
		}); err != nil {
			return err
		}
		var readErr error
		heads := tx.Ready // every available task
		if h, ok := tx.(journal.ReadyHeads); ok {
			heads = h.ReadyHeads // the first of each priority: the oldest is one
		}
		heads(func(id string) bool {
			rec, ok, err := tx.Task(id)
			if err != nil {
				readErr = err
				return false
			}
			if ok && (g.OldestAvailable.IsZero() || rec.Created.Before(g.OldestAvailable)) {
				g.OldestAvailable = rec.Created
			}
			return true
		})
		if readErr != nil {
			return readErr
		}
		return tx.EventsBackward(func(ev record.Event) (bool, error) {
			g.LastSeq = ev.Seq
			return false, nil
		})
	})
	return g, err
}

// LastSeq reads the sequence number of the newest event (0: none yet):
// where a follower of the log starts.
func (t *Tree) LastSeq(ctx context.Context) (uint64, error) {
	var last uint64
	err := t.read(ctx, func(tx journal.Tx, _ time.Time) error {
		last = 0
		return tx.EventsBackward(func(ev record.Event) (bool, error) {
			last = ev.Seq
			return false, nil
		})
	})
	return last, err
}

// waker wakes a waiting claim (keepTrying): c is signalled when a task
// may have become claimable; every is how often it looks again anyway.
// The zero waker polls every pollInterval.
type waker struct {
	c     <-chan struct{}
	every time.Duration
	// due, if set, says how long until the earliest scheduled task comes
	// due (ok false: none is scheduled): the waiting claim looks again
	// then, whatever every says.
	due func() (d time.Duration, ok bool)
}

// wakeBackstop is how often a waiting claim on a bbolt tree looks again
// when it is woken by changes: for what no file move signals, a lease
// running out.
var wakeBackstop = time.Second

// waitWake returns the waker of a claim that waits, and stop, which ends
// its watches. A task scheduled for later moves no file until a write
// finds it due, so the waker also fires when the earliest one comes due
// (untilDue, read by the claim that found nothing to claim). Every way a task becomes claimable puts its file in
// available/ (add, release, fail, revoke, requeue, a reap or a due time
// met by another claim: the move right after the commit) or drops it in
// inbox/, so an inotify watch on those two directories wakes the claim at
// once. The journal itself is not watched: a claim's own attempt writes
// it, and would wake itself. On a bbolt tree every writer is on this
// host, so the claim looks again only every wakeBackstop otherwise; on an
// etcd tree another host's move may not reach inotify (a network mount),
// so it keeps polling every pollInterval as well. When wait is not
// positive or nothing can be watched, it polls as before.
func (t *Tree) waitWake(wait time.Duration) (w waker, stop func()) {
	w, stop = t.watchWake(wait)
	if wait > 0 {
		w.due = t.untilDue
	}
	return w, stop
}

// untilDue is how long until the earliest scheduled task comes due, by
// the tree's clock, as the last claim that found nothing read it.
func (t *Tree) untilDue() (time.Duration, bool) {
	if t.nextDue == nil {
		return 0, false
	}
	at := t.nextDue.Load()
	if at == 0 {
		return 0, false
	}
	return time.Unix(0, at).Sub(t.opts.clock()()), true
}

// noteDue records when the earliest scheduled task comes due (zero: none).
func (t *Tree) noteDue(at time.Time) {
	if t.nextDue == nil {
		return
	}
	if at.IsZero() {
		t.nextDue.Store(0)
		return
	}
	t.nextDue.Store(at.UnixNano())
}

// watchWake is waitWake's watches.
func (t *Tree) watchWake(wait time.Duration) (w waker, stop func()) {
	if wait <= 0 || noWatch() {
		return waker{}, func() {}
	}
	dw, err := watchDirs(filepath.Join(t.root, string(fsmirror.Available)), filepath.Join(t.root, string(fsmirror.Inbox)))
	if err != nil {
		return waker{}, func() {}
	}
	every := wakeBackstop
	if t.store.Name() != "bbolt" {
		every = pollInterval
	}
	return waker{c: dw.C(), every: every}, func() { dw.Close() }
}

// dirWatch watches directories through inotify (by way of fsnotify), all
// on one inotify instance: C is signalled (coalesced) when an entry is
// made or moved into one of them, or a file in one is written to. An
// entry moved out or removed (a claim taking a task) does not signal: it
// makes nothing claimable.
type dirWatch struct {
	w    *fsnotify.Watcher
	c    chan struct{}
	once sync.Once
	err  error
}

// watchDirs watches dirs, which must be directories, not symbolic links
// to them (fsnotify would follow one: it has no IN_DONT_FOLLOW).
func watchDirs(dirs ...string) (*dirWatch, error) {
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("watch %s: not a directory (%s)", d, fi.Mode().Type())
		}
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if err := fw.Add(d); err != nil {
			fw.Close()
			return nil, err
		}
	}
	w := &dirWatch{w: fw, c: make(chan struct{}, 1)}
	go w.loop()
	return w, nil
}

// loop turns the directories' events into signals until Close. A lost
// event (the queue overflowed) may have been a task arriving: it signals.
func (w *dirWatch) loop() {
	events, errs := w.w.Events, w.w.Errors
	for events != nil || errs != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if !arrival(ev.Op) {
				continue
			}
		case _, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
		}
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}

// arrival reports whether an event in a watched directory may have made
// a task claimable: an entry made or moved in (Create), or a file in it
// written to (Write), not one moved out (Rename), removed or chmodded.
func arrival(op fsnotify.Op) bool { return op.Has(fsnotify.Create) || op.Has(fsnotify.Write) }

func (w *dirWatch) C() <-chan struct{} { return w.c }

// Close stops watching. Safe to call twice.
func (w *dirWatch) Close() error {
	w.once.Do(func() { w.err = w.w.Close() })
	return w.err
}
