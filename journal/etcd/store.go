package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
)

// Store is one open etcd journal. It holds no lock: every Update is an
// optimistic transaction (see the package doc), so Exclusive is false and
// fence finishes file moves per task rather than "the last commit".
type Store struct {
	b        *Backend
	dir      string // the tree's .fence: where the token ceiling's files are
	prefix   string
	readOnly bool
	timeout  time.Duration
	clock    func() time.Time
	// onUpgrade is OpenOptions.OnUpgrade.
	onUpgrade func(from, to string)

	ceilingChecked atomic.Bool
	// tokenFloor is the least token this handle may issue: above the
	// ceiling's files when it found the journal behind them.
	tokenFloor atomic.Uint64
	// witnessAt is when (by the journal's clock, Unix ns) the newest
	// witness this handle knows the ceiling's files hold was written: the
	// handle reads them again, and refreshes the witness, once that is
	// journal.WitnessRefresh old, so that no token it issues is younger
	// than that by more (witness.go).
	witnessAt atomic.Int64
	// The witness (witness.go): witnessDue asks the next commit that
	// issues a token to record it in the files.
	witnessDue atomic.Bool
	// ceilings is what the handle last read of the ceiling's files, for
	// Tx.LostTokens, the check of every write.
	ceilings  journal.CeilingCache
	committed atomic.Int64 // the revision of this handle's last commit

	// The cache: point keys as this handle last read or wrote them, kept
	// while nobody else writes (cache.go).
	cacheMu  sync.Mutex
	cacheRev int64
	cacheKV  map[string]*mvccpb.KeyValue
	liveKV   map[string]liveEntry        // liveness keys this handle wrote
	depsKV   map[string]*mvccpb.KeyValue // the whole dependents index, if known
	// depsLarge: the dependents index was found too large to keep.
	depsLarge atomic.Bool
	// prepared is the snapshot Head read for the next write transaction
	// (prepared.go); commits counts this handle's commits.
	prepared atomic.Pointer[preparedSnapshot]
	commits  atomic.Int64
	// warm: this handle's last commit moved the head, and no other
	// writer has been seen since (see readyWindow).
	warm bool
	// floorSeen is the ready index's floor as this handle last saw it
	// (floor.go): Open reads it first, every snapshot after.
	floorSeen atomic.Pointer[string]
}

var _ journal.Store = (*Store)(nil)

// Retries counts, process-wide, the Update runs that a conflict with
// another client's commit made run again.
var Retries atomic.Int64

// OtherConflicts counts the failed commits that were not rebased
// (rebase.go) but run again on a fresh snapshot: a key other than the
// head changed, or rebasing did not help.
var OtherConflicts atomic.Int64

func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

func (s *Store) newTx(ctx context.Context, write bool) *Tx {
	return &Tx{s: s, ctx: ctx, write: write, reads: map[string]int64{}, buf: map[string]*op{}}
}

// View runs fn on one snapshot. A snapshot that etcd compacted away while
// fn read it makes View run fn again on a fresh one, until the timeout,
// as Update does: a read is never failed by compaction.
func (s *Store) View(fn func(journal.Tx) error) error {
	ctx, cancel := s.ctx()
	defer cancel()
	for {
		t := s.newTx(ctx, false)
		err := t.begin()
		if err == nil {
			err = fn(t)
		}
		err = t.spoiled(err)
		if !errors.Is(err, errConflict) {
			return err
		}
		if ctx.Err() != nil {
			return s.b.unreachable(ctx.Err())
		}
	}
}

// spoiled is the outcome of a run of fn that returned err: a read that
// met a changed or compacted snapshot spoils the whole run, whatever fn
// made of the failed read (it may have turned it into a refusal of its
// own), so that the run is done again.
func (t *Tx) spoiled(err error) error {
	if errors.Is(t.err, errConflict) {
		return errConflict
	}
	if err == nil {
		err = t.err
	}
	return err
}

// Update runs fn and commits what it wrote in one etcd transaction that
// holds only if nothing fn read has changed since; else it runs fn again
// on a fresh snapshot, until the timeout.
//
// Optimism alone is not fair: under contention a writer can lose every
// race to writers that read after it. So after escalateAfter conflicts in
// a row a writer joins the writers' queue (an etcd mutex: first come,
// first served) and, holding it, runs alone: every optimistic commit
// checks that nobody holds the queue's head, so the holder loses at most
// one more race, to a commit already in flight. A holder that dies lets
// go when its session's lease (writeLockTTL) runs out.
func (s *Store) Update(fn func(journal.Tx) error) error {
	return s.UpdateReading(nil, false, fn)
}

var _ journal.Prefetcher = (*Store)(nil)

// UpdateReading is Update whose every run reads ahead, in the request
// that begins it, what ids' operations read first (prefetch.go).
func (s *Store) UpdateReading(ids []string, claims bool, fn func(journal.Tx) error) error {
	if s.readOnly {
		return errors.New("journal opened read-only")
	}
	ctx, cancel := s.ctx()
	defer cancel()
	var turn *writerTurn
	waits := 0 // runs that let a lone queued writer's turn pass
	defer func() {
		if turn != nil {
			turn.release()
		}
	}()
	spread := 0
	fresh := false // no prepared snapshot, no cached liveness key (prepared.go)
	for attempt := 0; ; attempt++ {
		// (A run made again while it holds a turn keeps it.)
		if attempt == escalateAfter && turn == nil {
			var err error
			turn, err = s.b.joinQueue(ctx)
			for errors.Is(err, errTurnLost) && ctx.Err() == nil {
				turn, err = s.b.joinQueue(ctx) // its lease ran out while it waited
			}
			if err != nil {
				return s.contended(ctx, attempt, err)
			}
		}
		t := s.newTx(ctx, true)
		t.turn, t.spread, t.fresh = turn, spread, fresh
		err := t.beginReading(ids, claims)
		if err == nil && turn == nil && t.queued > 0 {
			// Writers wait in the queue: a commit now would fail on
			// them, so none is sent. Behind a queue of several, join it;
			// behind one writer, let its turn pass (queue.go).
			if t.queued >= queueJoinAt || waits == maxQueueWaits {
				Queued.Add(1)
				attempt = escalateAfter - 1
			} else {
				waits++
				attempt--
				time.Sleep(time.Duration(rand.Int64N(int64(queueWait))))
			}
			continue
		}
		for rebases := 0; ; rebases++ {
			if err == nil {
				err = fn(t)
			}
			err = t.spoiled(err)
			if err == nil {
				err = t.commit()
			}
			var moved *headMoved
			if !errors.As(err, &moved) || rebases == maxRebases || ctx.Err() != nil {
				break
			}
			// Only the head moved: run again at once on what was read,
			// with the new head (rebase.go).
			Rebases.Add(1)
			if t, err = t.rebased(moved); err != nil {
				return err
			}
		}
		var moved *headMoved
		if t.unverified && !t.committed && !errors.Is(err, errConflict) && !errors.As(err, &moved) && ctx.Err() == nil {
			// The run took what it did not read itself (prepared.go) and
			// no commit checked it: made again on reads of its own.
			fresh = true
			attempt--
			continue
		}
		if err == nil {
			t.afterCommit()
			return nil
		}
		if errors.As(err, &moved) {
			err = errConflict
		} else if errors.Is(err, errConflict) {
			spread++
		}
		if !errors.Is(err, errConflict) {
			return err
		}
		if turn == nil && t.queued >= queueJoinAt && attempt < escalateAfter-1 {
			// Lost to the queue (the commit's Else counted it): join
			// it now rather than lose to it again (queue.go).
			Queued.Add(1)
			attempt = escalateAfter - 1
		}
		if turn != nil && turn.lost() {
			// Its lease ran out while it held the turn: join again.
			turn.release()
			turn = nil
			attempt = escalateAfter - 1
		}
		Retries.Add(1)
		if ctx.Err() != nil {
			return s.contended(ctx, attempt+1, ctx.Err())
		}
		// Whoever won has committed; a random backoff that doubles with
		// every loss (up to 16 ms) keeps the losers from meeting again at
		// once. Against the queue at 3 losses it doubled the CLI's claims
		// at 8 processes (37 → 77 claims/s): the queue costs several
		// consensus rounds per writer, a backoff none.
		if attempt > 0 && turn == nil {
			time.Sleep(time.Duration(rand.Int64N(int64(min(1<<attempt, 32)) * int64(500*time.Microsecond))))
		}
	}
}

// maxRebases bounds the runs on a moved head (rebase.go) one run of
// Update makes before it reads a fresh snapshot: each costs a commit
// request only, but a writer that keeps losing must still reach the
// writers' queue.
const maxRebases = 16

// queueJoinAt is how many writers in the queue make a writer that meets
// them join it at once (queue.go): a queue that long is contention that
// lasts. Behind one, a writer lets its turn pass, up to maxQueueWaits
// times, each a random pause of up to queueWait, and races again: two
// writers that met once must not take turns for good, at two extra
// writes a commit.
const (
	queueJoinAt   = 2
	maxQueueWaits = 8
	queueWait     = time.Millisecond
)

// Queued counts, process-wide, the Update runs that found writers in the
// queue and joined it at once instead of losing to it again (queue.go).
var Queued atomic.Int64

// Rebases counts, process-wide, the runs made again at once on a moved
// head (rebase.go).
var Rebases atomic.Int64

// escalateAfter is how many conflicts in a row send a writer to the
// writers' queue: a fallback that bounds how long one writer can lose,
// not the common path.
const escalateAfter = 8

// contended reports a timeout met while losing races (etcd answered: the
// tree is busy, not unreachable).
func (s *Store) contended(ctx context.Context, conflicts int, err error) error {
	if ctx.Err() == nil {
		return s.b.unreachable(err)
	}
	return fmt.Errorf("%w: %d commits lost to other writers in a row, then the writers' queue did not reach this one within %s (raise --timeout; etcd answered throughout)", journal.ErrBusy, conflicts, s.timeout)
}

// commit applies the buffered writes if nothing read has changed.
func (t *Tx) commit() error {
	if t.floorMoved() {
		return errConflict // floor.go
	}
	if t.headMod {
		t.buf[t.key(famMeta, metaHead)] = &op{val: t.head.encode()}
		t.buf[t.key(famMeta, metaFloor)] = &op{val: t.nextFloor()}
	}
	from := t.meta[metaVersion]
	to := from
	if t.v2 && from != SchemaVersion && from != foldedVersion {
		to = SchemaVersion
	}
	if t.folded {
		to = foldedVersion // compact.go
	}
	upgrade := to != from
	if upgrade {
		// The first V2 record (or folded one): the journal is to from
		// this commit on, which holds only if the version is still what
		// begin read.
		vk := t.key(famMeta, metaVersion)
		t.buf[vk] = &op{val: to}
		t.reads[vk] = t.verRev
	}
	if len(t.buf) == 0 {
		return nil
	}
	t.markSweep()
	cmps := make([]clientv3.Cmp, 0, len(t.reads)+len(t.ranges)+1)
	if t.turn == nil {
		// Nobody is in the writers' queue (see Update).
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(t.s.prefix+keyWriters+"/"), "=", 0).WithPrefix())
	} else {
		if t.turn.lost() {
			return errConflict // Update joins the queue again
		}
		// Still this writer's turn, given up by this very commit.
		cmps = append(cmps, t.turn.holds())
	}
	for k, rev := range t.reads {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
	}
	for _, r := range mergeRanges(t.ranges) {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(r[0]), "<", t.rev+1).WithRange(r[1]))
	}
	ops := make([]clientv3.Op, 0, len(t.buf))
	for k, o := range t.buf {
		switch {
		case o.del:
			ops = append(ops, clientv3.OpDelete(k))
		case o.lease != 0:
			ops = append(ops, clientv3.OpPut(k, o.val, clientv3.WithLease(o.lease)))
		default:
			ops = append(ops, clientv3.OpPut(k, o.val))
		}
	}
	// A failed commit brings the meta keys back (rebase.go), and the
	// turn's key, if it holds one.
	metaKey := t.key(famMeta, "")
	orElse := []clientv3.Op{clientv3.OpGet(metaKey, clientv3.WithPrefix())}
	if t.turn != nil {
		ops = append(ops, t.turn.giveUp())
		orElse = append(orElse, t.turn.check())
	} else {
		orElse = append(orElse, clientv3.OpGet(t.s.prefix+keyWriters+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	resp, err := t.s.b.cli.Txn(t.ctx).If(cmps...).Then(ops...).Else(orElse...).Commit()
	if err == nil && resp.Succeeded && t.headMod {
		t.s.committed.Store(resp.Header.Revision)
	}
	if err == nil && resp.Succeeded {
		t.committed = true
		if t.turn != nil {
			t.turn.released = true
		}
		t.s.commits.Add(1)
		t.s.cacheCommitted(t, resp.Header.Revision)
		if upgrade && to == SchemaVersion && t.s.onUpgrade != nil {
			t.s.onUpgrade(from, to)
		}
	}
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("%w: %d writes and %d checks in one etcd transaction: %v (etcd takes --max-txn-ops operations in one transaction, 128 by default, and fencectl needs %d at least: do less in one step, such as fewer tasks named in one claim, or start etcd with a higher --max-txn-ops)", journal.ErrTooLarge, len(ops), len(cmps), err, MinTxnOps)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// A pooled lease ran out (a long run of retries): take a new one.
		for _, o := range t.buf {
			if o.lease != 0 {
				t.s.b.dropLease(o.lease)
			}
		}
		return errConflict
	case err != nil:
		return t.s.b.unreachable(err)
	case !resp.Succeeded:
		t.s.dropCache() // what was read is stale somewhere: read afresh
		if t.turn != nil && t.turn.goneIn(resp) {
			return errConflict // Update joins the queue again
		}
		if t.turn == nil && len(resp.Responses) > 1 && resp.Responses[1].GetResponseRange().GetCount() > 0 {
			t.queued = resp.Responses[1].GetResponseRange().GetCount()
			return errConflict // lost to the queue (Update may join it)
		}
		if moved := headMovedFrom(resp, metaKey); moved != nil && moved.headRev != t.reads[t.key(famMeta, metaHead)] {
			return moved
		}
		OtherConflicts.Add(1)
		return errConflict
	}
	return nil
}

// mergeRanges folds overlapping scanned ranges into one compare each.
func mergeRanges(rs [][2]string) [][2]string {
	if len(rs) < 2 {
		return rs
	}
	rs = append([][2]string(nil), rs...)
	slices.SortFunc(rs, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r[0] <= last[1] {
			last[1] = max(last[1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// Head identifies the last commit: the mod revision of the head key. A
// handle that commits group after group reads a whole snapshot instead,
// for its next write transaction to begin on (prepared.go).
func (s *Store) Head() (string, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	if s.preparing() {
		return s.headPreparing(ctx)
	}
	resp, err := s.b.cli.Get(ctx, s.prefix+famMeta+metaHead)
	if err != nil {
		return "", s.b.unreachable(err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return "etcd:" + strconv.FormatInt(resp.Kvs[0].ModRevision, 10), nil
}

// CommitHead is Head as it was right after this handle's last commit
// that moved the head ("" if none): while Head still says so, nobody else
// has committed since.
func (s *Store) CommitHead() string {
	if r := s.committed.Load(); r != 0 {
		return "etcd:" + strconv.FormatInt(r, 10)
	}
	return ""
}

// Exclusive is false: writers on every host commit side by side.
func (s *Store) Exclusive() bool { return false }

// WritersHeld is false: nothing holds writers on other hosts back.
func (s *Store) WritersHeld() bool { return false }

// Park keeps the handle: there is no writer's turn to give up.
func (s *Store) Park() error { return nil }

// Resume takes the handle back.
func (s *Store) Resume(time.Duration) error { return nil }

// Verify reads and decodes every record of the journal.
func (s *Store) Verify() error {
	return s.View(func(jt journal.Tx) error {
		t := jt.(*Tx)
		for _, fam := range []string{famTask, famClaim, famEvent} {
			err := t.scanPrefix(fam, func(k, v string) (bool, error) {
				var err error
				switch fam {
				case famTask:
					_, err = journal.DecodeTask([]byte(v))
				case famClaim:
					_, err = journal.DecodeClaim([]byte(v))
				case famEvent:
					_, err = journal.DecodeEvent([]byte(v))
				}
				if err != nil {
					return false, &journal.CorruptError{Path: s.b.cfg.URL(), Detail: (fmt.Errorf("key %q: %w", s.prefix+fam+k, err)).Error()}
				}
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		if errs := t.Check(); len(errs) > 0 {
			return &journal.CorruptError{Path: s.b.cfg.URL(), Detail: (errors.Join(errs...)).Error()}
		}
		return nil
	})
}

// Close is a no-op: the client belongs to the Backend.
func (s *Store) Close() error { return nil }

// isCompacted reports a read at a revision the member no longer has (or
// has not applied yet, for a serializable read): read again afresh. The
// text is matched too: a read inside a Txn comes back as the server's
// error text, not as the client's error value.
func isCompacted(err error) bool {
	if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrFutureRev) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, rpctypes.ErrCompacted.Error()) || strings.Contains(msg, rpctypes.ErrFutureRev.Error())
}

// ExpireLease ends task id's claim's lease now, as if etcd had expired
// it: its liveness key goes, as etcd deletes it when the lease runs out
// (the lease itself may be shared with other claims, so it stays), and
// so does the marker of a recent sweep (sweep.go), as if its own lease
// had run out too: the next claim reaps the task. For tests of expiry,
// which cannot wind etcd's clock forward.
func (s *Store) ExpireLease(id string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	s.dropCache() // the key goes without moving the head: see cache.go
	_, err := s.b.cli.Txn(ctx).Then(clientv3.OpDelete(s.prefix+famLive+id), clientv3.OpDelete(s.prefix+famMeta+metaSweep)).Commit()
	return s.b.unreachable(err)
}
