package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Keeper defaults.
const (
	// DefaultCheckInterval is how often a keeper re-reads its lease when its
	// watch is silent (it also re-reads whenever the watch says the lease
	// may have changed: see openWatch).
	DefaultCheckInterval = time.Second
	// DefaultKeeperTick is how often the keeper looks at the clock.
	DefaultKeeperTick = 50 * time.Millisecond
)

// KeeperConfig configures a LeaseKeeper. Zero fields take the defaults
// named beside them.
type KeeperConfig struct {
	Task     string
	Token    uint64
	Agent    string
	Deadline time.Time // the lease's deadline when the keeper starts
	// TTL is the lease length each heartbeat asks for (0: the lease's
	// current one). Give it explicitly: a heartbeat by someone else with
	// the same token and a shorter --ttl changes the lease's current one.
	TTL time.Duration
	// Interval is the time between heartbeats (default TTL/3).
	Interval time.Duration
	// CheckInterval is the time between read-only checks of the lease
	// (default DefaultCheckInterval); a journal write triggers one at once.
	CheckInterval time.Duration
	// StopBefore: if no heartbeat has succeeded by Deadline - StopBefore
	// (journal busy, disk error), the keeper declares the lease at risk, so
	// that the holder is stopped before the deadline, not after.
	StopBefore time.Duration
	// Tick is how often the loop looks at the clock (default
	// DefaultKeeperTick).
	Tick time.Duration
	// TieToProcess ties the claim to this process (see liveness.go): from
	// Start until the keeper ends, a reaper that finds the process dead
	// reaps the task at once, reason "holder died", without waiting for
	// the TTL. For holders whose death means the work stopped (`fencectl
	// run`), not for an agent that outlives its process. bbolt trees only.
	TieToProcess bool
	// Tie is the claim's tie made with the claim
	// (ClaimRequest.TieToProcess): the keeper keeps it, as one it made.
	Tie *ProcessTie
	// WatchLater starts the keeper without its watch, for a claim
	// not worked on yet (run --loop's task in hand): it heartbeats and
	// holds the tie, and is not woken by every commit of the tree. Watch
	// sets the watch up when the work starts.
	WatchLater bool
}

// TieError means a keeper could not tie its claim to its process: the
// claim is kept all the same, and a death is noticed at the TTL.
type TieError struct{ Err error }

func (e *TieError) Error() string {
	return fmt.Sprintf("cannot tie the claim to this process (%v): if it dies, its task is freed when its lease runs out, not at once", e.Err)
}

func (e *TieError) Unwrap() error { return e.Err }

// LeaseAtRiskError means heartbeats kept failing and the lease would run
// out before another could succeed.
type LeaseAtRiskError struct {
	Task     string
	Token    uint64
	Deadline time.Time
	Err      error // the last heartbeat's failure
	// Over: the deadline had passed when the keeper looked (its process
	// was stopped or starved past it): another agent may hold the task.
	Over time.Duration
}

func (e *LeaseAtRiskError) Error() string {
	if e.Over > 0 {
		return fmt.Sprintf("task %s: lease of token %d ended at %s, %s before this process could look (it was stopped or starved), and no heartbeat got through (last: %v): the task may be another agent's by now, and what the command did since is not fenced", e.Task, e.Token, fmtTime(e.Deadline), e.Over.Round(time.Millisecond), e.Err)
	}
	return fmt.Sprintf("task %s: lease of token %d ends at %s and no heartbeat got through (last: %v); stopping before it runs out", e.Task, e.Token, fmtTime(e.Deadline), e.Err)
}

func (e *LeaseAtRiskError) Unwrap() error { return e.Err }

// keeperStep says what one runOnce did.
type keeperStep int

// What runOnce can do.
const (
	stepIdle      keeperStep = iota // nothing was due
	stepHeartbeat                   // a heartbeat succeeded
	stepCheck                       // a read-only check found the lease current
	stepRetry                       // a heartbeat or check failed for now (busy, I/O); will retry
	stepLost                        // the lease is lost or at risk; Lost() is closed
)

// LeaseKeeper keeps one lease alive in the background and says, as soon as
// it knows, that the lease is gone: revoked, reaped, taken over, or at risk
// because heartbeats are not getting through. `fencectl run` stops its
// command the moment Lost() closes.
type LeaseKeeper struct {
	tree *Tree
	cfg  KeeperConfig

	mu        sync.Mutex
	deadline  time.Time
	nextBeat  time.Time
	nextCheck time.Time
	lastErr   error
	lostErr   error

	untie    func() // drops the liveness file (TieToProcess)
	keepTie  bool   // StopKeepingTie: the loop leaves untie to the caller
	untieOne sync.Once
	// watchChecks counts the checks a journal write woke, and
	// watchMinGap is the shortest time between two of them (for tests).
	watchChecks atomic.Int64
	watchMinGap atomic.Int64
	lost        chan struct{}
	stop        chan struct{}
	done        chan struct{}
	attach      chan attachWatch // Watch's hand-over to the loop
	started     bool
	// stoppedUnstarted: Stop came before Start; Start refuses, Watch ends at once.
	stoppedUnstarted bool
	stopOnce         sync.Once
}

// NewKeeper checks cfg, fills in the defaults and returns a keeper that is
// not yet running.
func (t *Tree) NewKeeper(cfg KeeperConfig) (*LeaseKeeper, error) {
	if err := ValidateID(cfg.Task); err != nil {
		return nil, err
	}
	if cfg.Token == 0 || cfg.Deadline.IsZero() {
		return nil, invalidf("", RuleMissing, nil, "keeper needs the claim's token and deadline")
	}
	if cfg.TTL < 0 || cfg.Interval < 0 || cfg.CheckInterval < 0 || cfg.StopBefore < 0 || cfg.Tick < 0 {
		return nil, invalidf("", RuleRange, nil, "keeper durations must not be negative")
	}
	length := cfg.TTL
	if length == 0 {
		length = cfg.Deadline.Sub(t.now())
	}
	if cfg.Interval == 0 {
		cfg.Interval = max(length/3, time.Millisecond)
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultKeeperTick
	}
	now := t.now()
	return &LeaseKeeper{
		tree: t, cfg: cfg, deadline: cfg.Deadline,
		nextBeat: now.Add(cfg.Interval), nextCheck: now.Add(cfg.CheckInterval),
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		attach: make(chan attachWatch),
	}, nil
}

// WatchError means the journal watch (inotify) could not be set up, most
// often because the user ran out of inotify instances
// (fs.inotify.max_user_instances). The keeper runs anyway, but notices a
// revoke or a takeover only at its next check (CheckInterval) instead of
// within milliseconds.
type WatchError struct{ Err error }

func (e *WatchError) Error() string {
	return fmt.Sprintf("cannot watch the journal (%v): a lost lease is noticed within the check interval instead of at once (raise fs.inotify.max_user_instances)", e.Err)
}

func (e *WatchError) Unwrap() error { return e.Err }

// ErrKeeperStarted is a second Start of one LeaseKeeper: two loops would
// heartbeat one lease twice and close its channels twice.
var ErrKeeperStarted = errors.New("lease keeper already started: a keeper runs once; make a new one with NewKeeper")

// ErrKeeperNotStarted is a Watch of a keeper that was not started: there
// is no loop to hand the watch to (it waited for one for good).
var ErrKeeperNotStarted = errors.New("lease keeper not started: Start it (with WatchLater) before Watch; nothing was done")

// ErrKeeperStopped is a Start after Stop: the keeper would keep nothing,
// while its holder took the lease for kept.
var ErrKeeperStopped = errors.New("lease keeper stopped before it was started: it keeps nothing; make a new one with NewKeeper")

// Start sets up the keeper's watch (openWatch; with TieToProcess, the
// liveness file too), then runs the keeper in the background until Stop, ctx's end, or
// the end of the lease. The watch is in place when Start returns, so a
// holder that starts its work after Start cannot miss a revoke that lands
// right away. A non-nil error is a *WatchError or a *TieError (or both,
// joined): the keeper runs all the same, polling every CheckInterval, or
// leaving a death to the TTL. A keeper runs once: a second Start returns
// ErrKeeperStarted and changes nothing.
func (k *LeaseKeeper) Start(ctx context.Context) error {
	k.mu.Lock()
	again, stopped := k.started, k.stoppedUnstarted
	k.started = true
	k.mu.Unlock()
	if stopped {
		return ErrKeeperStopped
	}
	if again {
		return ErrKeeperStarted
	}
	var (
		changed <-chan struct{}
		w       journal.Watcher
		err     error
	)
	if !k.cfg.WatchLater {
		var missed bool
		w, changed, missed, err = k.openWatch()
		if missed {
			w.(*holderSub).signal() // read the lease at once
		}
	}
	if k.cfg.Tie != nil {
		k.untie = k.cfg.Tie.Untie
	} else if k.cfg.TieToProcess && k.tree.store.Name() == "bbolt" {
		untie, terr := k.tree.holdLiveness(k.cfg.Token)
		if terr != nil {
			err = errors.Join(err, &TieError{Err: terr})
		}
		k.untie = untie
	}
	go k.loop(ctx, w, changed)
	return err
}

// openWatch sets up the keeper's watch: a claim tied in its own commit
// (Tie) on a bbolt journal hears of its own process's leases only
// (holderwake.go); any other watches the journal. missed says that a
// change to the lease may have come before the watch: the keeper reads it
// at once. It is only ever said of a holder's watch: a journal watch
// cannot tell, and the caller decides.
func (k *LeaseKeeper) openWatch() (w journal.Watcher, changed <-chan struct{}, missed bool, err error) {
	if k.cfg.Tie != nil && k.tree.store.Name() == "bbolt" && k.tree.batch.writerSlot != nil && !noWatch() {
		if sub, unheard := k.tree.batch.live.wake.subscribe(k.cfg.Token); sub != nil {
			// Subscribed first: an append after this wakes the keeper;
			// one before it grew the anchor; a change by this process
			// before it was noted.
			return sub, sub.C(), unheard || k.cfg.Tie.anchorGrew(), nil
		}
	}
	w, changed, err = k.tree.keeperWatch()
	return w, changed, false, err
}

// keeperWatch sets up a keeper's journal watch.
func (t *Tree) keeperWatch() (journal.Watcher, <-chan struct{}, error) {
	w, err := t.watchJournal()
	if err == nil && noWatch() {
		w.Close()
		w, err = nil, unix.EMFILE
	}
	if err != nil {
		return nil, nil, &WatchError{Err: err}
	}
	return w, w.C(), nil
}

// attachWatch hands a watch set up by Watch to the keeper's loop, which
// closes done once it has checked the lease with the watch in place.
type attachWatch struct {
	w       journal.Watcher
	changed <-chan struct{}
	done    chan struct{}
	check   bool // read the lease at once
}

// Watch sets up the watch of a keeper started with WatchLater and checks
// the lease at once if it may have changed unwatched: when it returns, a revoke that landed while
// the keeper had no watch has been seen (Lost is closed), and one that
// lands later will be. A non-nil error is a *WatchError: the keeper goes
// on polling. It does nothing on a keeper that has ended.
func (k *LeaseKeeper) Watch() error {
	k.mu.Lock()
	started, stopped := k.started, k.stoppedUnstarted
	k.mu.Unlock()
	if stopped {
		return nil // ended: nothing to watch
	}
	if !started {
		return ErrKeeperNotStarted
	}
	w, changed, missed, err := k.openWatch()
	_, holder := w.(*holderSub)
	a := attachWatch{w: w, changed: changed, done: make(chan struct{}), check: missed || !holder}
	select {
	case k.attach <- a:
	case <-k.done:
		if w != nil {
			w.Close()
		}
		return err
	}
	select {
	case <-a.done:
	case <-k.done:
	}
	return err
}

// Stop ends the keeper and waits for it. Safe to call twice, and before
// Start.
func (k *LeaseKeeper) Stop() {
	k.stopOnce.Do(func() { close(k.stop) })
	k.mu.Lock()
	started := k.started
	if !started {
		k.stoppedUnstarted = true
	}
	k.mu.Unlock()
	if started {
		<-k.done
	}
}

// StopKeepingTie is Stop, except that the claim stays tied to this
// process (TieToProcess) until the caller calls the function it returns
// (safe to call twice): a holder whose work is over stops heartbeats and
// checks at once, but keeps the tie until its complete has committed, so
// that if it dies before that its claim is still reaped at once ("holder
// died"), not when the lease runs out.
func (k *LeaseKeeper) StopKeepingTie() (untie func()) {
	k.mu.Lock()
	k.keepTie = true
	k.mu.Unlock()
	k.Stop()
	return k.dropTie
}

// dropTie drops the liveness file, once.
func (k *LeaseKeeper) dropTie() {
	k.untieOne.Do(func() {
		if k.untie != nil {
			k.untie()
		}
	})
}

// Lost is closed when the lease ends: lost, at risk, or settled by a
// complete, release or fail with its own token (see SettledByHolder); Err
// then says why.
func (k *LeaseKeeper) Lost() <-chan struct{} { return k.lost }

// Err returns why the lease ended (a *StaleTokenError or a
// *LeaseAtRiskError), or nil while it is held.
func (k *LeaseKeeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lostErr
}

// Deadline returns the lease's deadline as of the last heartbeat or check:
// the real one, even when someone else holding the token moved it.
func (k *LeaseKeeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

func (k *LeaseKeeper) loop(ctx context.Context, w journal.Watcher, changed <-chan struct{}) {
	defer close(k.done)
	defer func() {
		k.mu.Lock()
		keep := k.keepTie
		k.mu.Unlock()
		if !keep {
			k.dropTie()
		}
	}()
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	var attached chan struct{} // Watch waits for the check after it
	defer func() {
		if attached != nil {
			close(attached)
		}
	}()
	go k.watchStopPoint(ctx)
	tick := time.NewTicker(k.cfg.Tick)
	defer tick.Stop()
	// A write after a quiet spell is checked at once; under a storm of
	// writes (eight run --loop processes on one tree commit about a
	// thousand times a second, and each woke every other runner's
	// keeper for a read of the journal) checks come at most every
	// watchSpacing, the last write of a burst included.
	spaced := time.NewTimer(time.Hour)
	spaced.Stop()
	defer spaced.Stop()
	var lastCheck time.Time
	waiting := false
	for {
		wrote := false
		select {
		case <-k.stop:
			return
		case <-ctx.Done():
			return
		case <-changed:
			if since := time.Since(lastCheck); since < watchSpacing {
				if !waiting {
					waiting = true
					spaced.Reset(watchSpacing - since)
				}
				continue
			}
			if waiting { // this check covers the write the timer waits for
				spaced.Stop()
				waiting = false
			}
			wrote = true
		case <-spaced.C:
			waiting, wrote = false, true
		case a := <-k.attach:
			w, changed, attached = a.w, a.changed, a.done
			wrote = a.check // a revoke may have landed unwatched
		case <-tick.C:
		}
		if wrote {
			now := time.Now()
			if gap := int64(now.Sub(lastCheck)); k.watchChecks.Add(1) > 1 && (k.watchMinGap.Load() == 0 || gap < k.watchMinGap.Load()) {
				k.watchMinGap.Store(gap)
			}
			lastCheck = now
		}
		if step, _ := k.runOnce(ctx, k.tree.now(), wrote); step == stepLost {
			return
		}
		if attached != nil {
			close(attached)
			attached = nil
		}
	}
}

// watchStopPoint gives the lease up as at risk once the point where the
// holder must stop (Deadline - StopBefore) passes with no heartbeat having
// moved the deadline, whatever the loop is doing. The loop's own check
// does the same, but only between calls: a heartbeat that does not return
// (etcd gone quiet, a disk that hangs) would hold it, and the holder would
// work on past its lease while another agent takes the task.
func (k *LeaseKeeper) watchStopPoint(ctx context.Context) {
	tick := time.NewTicker(k.cfg.Tick)
	defer tick.Stop()
	for {
		select {
		case <-k.done:
			return
		case <-k.lost:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k.mu.Lock()
		deadline, last := k.deadline, k.lastErr
		k.mu.Unlock()
		now := k.tree.now()
		if now.Before(deadline.Add(-k.cfg.StopBefore)) {
			continue
		}
		k.loseAtRisk(now, deadline, last, "the heartbeat did not return in time")
		return
	}
}

// watchSpacing is the least time between two checks a journal write
// wakes (LeaseKeeper.loop): it bounds how late a revoke is seen under a
// storm of writes, and how many reads the storm costs each keeper.
const watchSpacing = 5 * time.Millisecond

// runOnce does what is due at now: a read-only check when the journal
// changed or a check is due, a heartbeat when one is due, and then gives
// the lease up if it ended, or is at risk of running out before a
// heartbeat can get through. A check re-reads the lease's deadline: a
// heartbeat with the same token and a shorter --ttl (CMD's own, say) moves
// it, and then the keeper heartbeats at once rather than trusting a
// deadline that is no longer true.
func (k *LeaseKeeper) runOnce(ctx context.Context, now time.Time, journalChanged bool) (keeperStep, error) {
	k.mu.Lock()
	if k.lostErr != nil {
		k.mu.Unlock()
		return stepLost, k.lostErr
	}
	deadline, nextBeat := k.deadline, k.nextBeat
	beatDue, checkDue := !now.Before(nextBeat), journalChanged || !now.Before(k.nextCheck)
	k.mu.Unlock()

	req := FencedRequest{ID: k.cfg.Task, Token: k.cfg.Token, Agent: k.cfg.Agent, TTL: k.cfg.TTL}
	step := stepIdle
	var err error
	if checkDue && !beatDue {
		var rec record.Task
		rec, err = k.tree.withTimeout(k.lockWait(deadline, now)).Verify(ctx, req)
		k.mu.Lock()
		k.nextCheck = now.Add(k.cfg.CheckInterval)
		if err == nil && rec.Lease != nil && !rec.Lease.Deadline.Equal(deadline) {
			deadline = rec.Lease.Deadline
			k.deadline = deadline
		}
		k.mu.Unlock()
		if err == nil {
			step = stepCheck
			// The next heartbeat would come after the point where the
			// holder must stop: send it now.
			beatDue = !nextBeat.Before(deadline.Add(-k.cfg.StopBefore))
		}
	}
	if beatDue {
		var res Result
		res, err = k.tree.withTimeout(k.lockWait(deadline, now)).Heartbeat(ctx, req)
		if err == nil {
			k.mu.Lock()
			k.deadline = res.Task.Lease.Deadline
			k.nextBeat = k.beatAfter(now, k.deadline)
			k.nextCheck = now.Add(k.cfg.CheckInterval)
			k.lastErr = nil
			k.mu.Unlock()
			return stepHeartbeat, nil
		}
		k.mu.Lock()
		k.nextBeat = now.Add(min(time.Second, max(k.cfg.Interval/4, k.cfg.Tick)))
		k.mu.Unlock()
	}
	var stale *StaleTokenError
	var moved *JournalMovedError
	switch {
	case errors.As(err, &stale), errors.As(err, &moved):
		return k.lose(err)
	case err != nil:
		step = stepRetry
		k.mu.Lock()
		k.lastErr = err
		k.mu.Unlock()
	}
	if !now.Before(deadline.Add(-k.cfg.StopBefore)) {
		k.mu.Lock()
		last := k.lastErr
		k.mu.Unlock()
		return k.loseAtRisk(now, deadline, last, "no heartbeat was due in time; the heartbeat interval is too long for the lease")
	}
	return step, err
}

// beatAfter is when the heartbeat after one that set deadline at now is
// due: after Interval, but never later than halfway to the point where the
// holder must stop. An interval past that point (the lease length came
// from the tree, not from whoever chose the interval) would make every
// check find a heartbeat due, and the keeper's own heartbeat wakes its
// journal watch for a check at once: a heartbeat storm.
func (k *LeaseKeeper) beatAfter(now, deadline time.Time) time.Time {
	window := deadline.Add(-k.cfg.StopBefore).Sub(now)
	return now.Add(max(min(k.cfg.Interval, window/2), time.Millisecond))
}

// lockWait bounds a wait for the journal lock: never past the point where
// the holder must stop.
// A tree opened with NoWait (--timeout 0: the caller's own steps do not
// wait) still lets the keeper wait up to that point.
func (k *LeaseKeeper) lockWait(deadline, now time.Time) time.Duration {
	left := max(deadline.Add(-k.cfg.StopBefore).Sub(now), 10*time.Millisecond)
	if k.tree.opts.Timeout < 0 {
		return left
	}
	return min(k.tree.opts.Timeout, left)
}

// SettledByHolder reports whether err, a keeper's Err, says that the lease
// was ended with its own token — completed, released or failed by whoever
// holds that token (the command run under it), not lost to someone else —
// and how ("completed", "released" or "failed").
func SettledByHolder(err error) (string, bool) {
	var stale *StaleTokenError
	if !errors.As(err, &stale) || stale.Reason != ReasonStaleToken {
		return "", false
	}
	switch stale.LostBy {
	case "completed", "released", "failed":
		return stale.LostBy, true
	}
	return "", false
}

// loseAtRisk gives the lease up as at risk of running out at deadline:
// last is the last heartbeat's failure, or nil when none failed (why then
// says what kept it from getting through).
func (k *LeaseKeeper) loseAtRisk(now, deadline time.Time, last error, why string) (keeperStep, error) {
	if last == nil {
		last = errors.New(why)
	}
	return k.lose(&LeaseAtRiskError{Task: k.cfg.Task, Token: k.cfg.Token, Deadline: deadline, Err: last, Over: max(now.Sub(deadline), 0)})
}

func (k *LeaseKeeper) lose(err error) (keeperStep, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lostErr == nil {
		k.lostErr = err
		close(k.lost)
	}
	return stepLost, k.lostErr
}
