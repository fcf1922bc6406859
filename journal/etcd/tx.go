package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// errConflict says another client committed something this transaction
// read (or etcd compacted its snapshot away): Update runs the function
// again on a fresh snapshot.
var errConflict = errors.New("etcd: the snapshot changed; run again")

// pageSize is how many keys a scan fetches per request.
const pageSize = 256

// Tx is one transaction: reads of one snapshot, writes buffered until
// commit (see the package doc).
type Tx struct {
	s     *Store
	ctx   context.Context
	write bool
	now   time.Time

	rev     int64            // the snapshot; 0 before the first read
	reads   map[string]int64 // key → mod revision seen (0: absent)
	ranges  [][2]string      // ranges scanned: nothing in them may change
	buf     map[string]*op   // writes, by key
	head    head
	headMod bool
	meta    map[string]string
	writes  int
	err     error // sticky: a read that failed spoils the transaction
	// untracked marks scans whose result needs no check at commit (see
	// Expired).
	untracked bool
	turn      *writerTurn // this run holds the writers' queue (Store.Update)
	// queued is how many writers waited in the queue at the snapshot, or
	// at a failed commit (queue.go): a commit of this run's would fail on
	// them.
	queued    int64
	expired   []string        // Expired's snapshot answer, once read
	issued    map[uint64]bool // tokens this run issued: no claim yet
	readyPage int64           // the next page size of the ready scan
	// firstPage is the size of the ready index's first page as begin
	// read it (Store.readyWindow); headRev is the head's mod revision at
	// the snapshot.
	firstPage, headRev int64
	// fetched holds keys read ahead (prefetch), not yet checked: get
	// takes them from here and only then counts them as read.
	fetched  map[string]*mvccpb.KeyValue
	pageHook func([]*mvccpb.KeyValue) // called with each page a scan fetches
	pages    map[pageKey]*clientv3.GetResponse
	cached   bool                        // the store's cache is current (Store.cacheValid)
	liveScan map[string]*mvccpb.KeyValue // every liveness key at the snapshot, once scanned

	verRev   int64  // the version key's mod revision at the snapshot
	v2       bool   // this run wrote a V2 record (journal.IsV2): commit raises the version
	folded   bool   // this run folded a task (compact.go): commit marks the journal foldedVersion
	first    uint64 // first event this run appended
	requests int    // reads sent to etcd, begin's included (for tests)
	// got holds every key get handed out (a rebased run finds them
	// without a request: rebase.go).
	got map[string]*mvccpb.KeyValue
	// spread is how many runs of this Update lost a race on more than the
	// head: Ready then starts from a random one of its first candidates
	// (spread.go).
	spread int
	// fresh: this run takes no prepared snapshot and no cached liveness
	// key; unverified: it took one, and only its commit checks what it
	// read (prepared.go); committed: its commit went through.
	fresh, unverified, committed bool

	// The ready index's floor (floor.go): where ready scans start, the
	// keys they read from there, whether Ready ran, and the floor of the
	// head a rebased run runs on.
	floor        string
	windowed     bool // scan reads the ready index a window at a time (window.go)
	readySeen    []string
	readyScanned bool
	rebasedOn    *string
	// swept: begin found a recent sweep and read no expiry pages;
	// sweepAll: Expired sweeps anyway; sweeping: this run swept, and its
	// commit marks it (sweep.go).
	swept, sweepAll, sweeping bool
}

// op is one buffered write.
type op struct {
	val   string
	lease clientv3.LeaseID
	del   bool
	// until is, for a liveness key, how long etcd keeps its lease at
	// least, on this host's monotonic clock (cache.go).
	until time.Time
}

var _ journal.Tx = (*Tx)(nil)

func (t *Tx) key(fam, rest string) string { return t.s.prefix + fam + rest }

// fail records the first error a read met and returns it. An etcd error
// that means "read again" (a compacted snapshot) makes the whole Update
// run again rather than fail one operation.
func (t *Tx) fail(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, errConflict) || isCompacted(err) {
		err = errConflict
	} else {
		err = t.s.b.unreachable(err)
	}
	if t.err == nil {
		t.err = err
	}
	return err
}

// begin reads the meta keys and the first pages of the indexes most
// transactions scan, in one request; its revision fixes the snapshot every
// later read of this transaction sees.
func (t *Tx) begin() error {
	_, err := t.beginWith(nil)
	return err
}

// beginWith is begin that makes the extra reads in the same request, at
// the snapshot's revision, and returns their answers.
func (t *Tx) beginWith(extra []clientv3.Op) ([]*etcdserverpb.ResponseOp, error) {
	if t.err != nil {
		return nil, t.err
	}
	if t.rev != 0 {
		return nil, nil
	}
	var snap *snapshot
	var hint string
	if p := t.takePrepared(); p != nil {
		// Begun on the snapshot Head read (prepared.go): extra is read
		// by the caller, what of it is not known.
		snap, hint, t.firstPage = p.snap, p.readyFrom, p.readyPage
		snap.meta = maps.Clone(snap.meta)
		t.unverified = true
	} else {
		t.requests++
		t.firstPage = t.s.readyWindow(t.write)
		hint = t.s.readyHint()
		var err error
		if snap, err = t.s.b.readSnapshot(t.ctx, extra, t.firstPage, hint); err != nil {
			return nil, t.fail(err)
		}
	}
	t.rev, t.headRev, t.floor, t.swept = snap.rev, snap.headRev, snap.floor, snap.swept
	t.queued = snap.queued
	if t.pages == nil {
		t.pages = map[pageKey]*clientv3.GetResponse{}
	}
	for k, p := range snap.pages {
		t.pages[k] = p
	}
	t.keepFirstPage(snap, hint)
	t.s.noteFloor(t.floor)
	t.meta, t.verRev = snap.meta, snap.verRev
	if t.write {
		t.reads[t.key(famMeta, metaHead)] = snap.headRev
	}
	t.cached = t.s.cacheValid(snap.headRev)
	if t.err = t.s.b.checkMeta(snap.meta); t.err != nil {
		return nil, t.err
	}
	// Every snapshot, not only Open's: a long-lived handle (run --loop,
	// mcp, serve) must not act on another tree's journal that took the
	// prefix after this tree's was wiped.
	if t.err = t.s.b.checkTree(t.s.dir, snap.meta); t.err != nil {
		return nil, t.err
	}
	h, herr := decodeHead(t.meta[metaHead])
	if herr != nil {
		t.err = &journal.CorruptError{Path: t.s.b.cfg.URL(), Detail: herr.Error()}
	}
	t.head = h
	t.s.noteCounter(h.Token)
	return snap.extra, t.err
}

// takePrepared returns the snapshot Head prepared for this transaction,
// if it is a write that may begin on one (prepared.go).
func (t *Tx) takePrepared() *preparedSnapshot {
	if !t.write || t.fresh {
		return nil
	}
	return t.s.takePrepared()
}

// firstReadyPage is the size of the ready index's first page (most
// claims need one entry of it).
const firstReadyPage = 16

// warmReadyPage is the first page of a handle whose cache is warm (see
// Store.readyWindow).
const warmReadyPage = 64

// firstPageSize is the ready index's first page size of this transaction.
func (t *Tx) firstPageSize() int64 {
	if t.firstPage == 0 {
		return firstReadyPage
	}
	return t.firstPage
}

// pageKey names one page request of a scan.
type pageKey struct {
	from, hi string
	limit    int64
}

// page reads one page of [from, hi) at the snapshot. The snapshot never
// changes, so a page read once is kept for the transaction: a group
// commit's claims each scan the ready index from its start, and only the
// first pays the round trip.
func (t *Tx) page(from, hi string, limit int64) (*clientv3.GetResponse, error) {
	k := pageKey{from, hi, limit}
	if r, ok := t.pages[k]; ok {
		return r, nil
	}
	if r, ok := t.cachedPage(k); ok {
		return r, nil
	}
	t.requests++
	r, err := t.s.b.cli.Get(t.ctx, from, append(t.pinned(), clientv3.WithRange(hi), clientv3.WithLimit(limit))...)
	if err != nil {
		return nil, err
	}
	if t.pages == nil {
		t.pages = map[pageKey]*clientv3.GetResponse{}
	}
	t.pages[k] = r
	return r, nil
}

// prefetchMax bounds a prefetch to well inside etcd's default limit of
// 128 operations a request.
const prefetchMax = 64

// prefetch reads ahead the records and liveness keys of ids in one
// request, for get to find. Nothing is checked at commit until get hands
// a key out; a failed prefetch is forgotten (get reads the keys itself).
func (t *Tx) prefetch(ids []string) {
	var keys []string
	for _, id := range ids {
		keys = append(keys, t.key(famTask, id), t.key(famLive, id))
		if len(keys) >= prefetchMax {
			break
		}
	}
	t.readAhead(keys, nil)
}

// prefetchKeys reads keys ahead in one request, for get to find.
func (t *Tx) prefetchKeys(keys []string) {
	if len(keys) == 0 {
		return
	}
	kvs, err := t.readAt(keys)
	if err != nil {
		return
	}
	if t.fetched == nil {
		t.fetched = map[string]*mvccpb.KeyValue{}
	}
	for i, k := range keys {
		t.fetched[k] = kvs[i]
	}
}

// readAt reads keys at the snapshot in one request: one kv per key, nil
// for an absent one. A server started with a --max-txn-ops below
// len(keys) refuses the request: each half is read on its own.
func (t *Tx) readAt(keys []string) ([]*mvccpb.KeyValue, error) {
	t.requests++
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(k, t.pinned()...)
	}
	var ranges [][]*mvccpb.KeyValue
	if len(ops) == 1 {
		resp, err := t.s.b.cli.Do(t.ctx, ops[0])
		if err != nil {
			return nil, err
		}
		ranges = append(ranges, resp.Get().Kvs)
	} else {
		resp, err := t.s.b.cli.Txn(t.ctx).Then(ops...).Commit()
		if tooManyOps(err) {
			half := len(keys) / 2
			lo, err := t.readAt(keys[:half])
			if err != nil {
				return nil, err
			}
			hi, err := t.readAt(keys[half:])
			return append(lo, hi...), err
		}
		if err != nil {
			return nil, err
		}
		for _, r := range resp.Responses {
			ranges = append(ranges, r.GetResponseRange().Kvs)
		}
	}
	out := make([]*mvccpb.KeyValue, len(keys))
	for i, kvs := range ranges {
		if len(kvs) > 0 {
			out[i] = kvs[0]
		}
	}
	return out, nil
}

// track records that k was read as kv (nil: absent), for the commit's
// check.
func (t *Tx) track(k string, kv *mvccpb.KeyValue) {
	if !t.write {
		return
	}
	if t.got == nil {
		t.got = map[string]*mvccpb.KeyValue{}
	}
	t.got[k] = kv
	t.reads[k] = 0
	if kv != nil {
		t.reads[k] = kv.ModRevision
	}
}

// liveCached reports whether this transaction may take liveness keys
// from the store's cache: a write, on a cache that holds the snapshot's
// state (cache.go).
func (t *Tx) liveCached() bool { return t.write && !t.fresh && t.cached }

// cachedPage answers a read of a page of the dependents index from the
// store's cache, if it holds the whole index at this snapshot (cache.go).
func (t *Tx) cachedPage(k pageKey) (*clientv3.GetResponse, bool) {
	p := t.key(famDeps, "")
	if !t.cached || k.from < p || k.hi > rangeEnd(p) {
		return nil, false
	}
	return t.s.depsPage(k.from, k.hi, k.limit)
}

// pinned are the options of every read after the first: at the
// snapshot's revision, and serializable (no round through consensus): the
// member's store at a revision it has applied is exact, and one that has
// not applied it yet answers ErrFutureRev, which runs the transaction
// again. Only begin's read is linearizable; it fixes the snapshot.
func (t *Tx) pinned() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithRev(t.rev), clientv3.WithSerializable()}
}

// get reads keys as this transaction sees them: its own writes, else the
// snapshot. A key that is absent maps to nil.
func (t *Tx) get(keys ...string) (map[string]*mvccpb.KeyValue, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	out := make(map[string]*mvccpb.KeyValue, len(keys))
	livePrefix := t.key(famLive, "")
	var missing []string
	for _, k := range keys {
		if o, ok := t.buf[k]; ok {
			if !o.del {
				out[k] = &mvccpb.KeyValue{Key: []byte(k), Value: []byte(o.val), Lease: int64(o.lease)}
			} else {
				out[k] = nil
			}
			continue
		}
		kv, ok := t.fetched[k]
		live := strings.HasPrefix(k, livePrefix)
		if live && !ok {
			t.scanLiveIfRead()
		}
		if !ok && live && t.liveScan != nil {
			kv, ok = t.liveScan[k[len(livePrefix):]], true
		}
		if !ok && t.cached && !live {
			kv, ok = t.s.cacheGet(k)
		}
		if !ok && live && t.liveCached() {
			if kv, ok = t.s.cacheGetLive(k); ok {
				t.unverified = true // see prepared.go
			}
		}
		if ok {
			out[k] = kv
			t.track(k, kv)
			continue
		}
		missing = append(missing, k)
	}
	if len(missing) == 0 {
		return out, nil
	}
	kvs, err := t.readAt(missing)
	if err != nil {
		return nil, t.fail(err)
	}
	for i, k := range missing {
		out[k] = kvs[i]
		t.track(k, kvs[i])
		if t.cached && !strings.HasPrefix(k, livePrefix) {
			t.s.cachePut(t.headRev, k, kvs[i])
		}
	}
	return out, nil
}

// scan calls fn for every key in [lo, hi) in key order, as this
// transaction sees it, until fn returns false. Only the part of the range
// actually read is checked at commit: a claim that stops at the first
// ready task does not conflict with an add further down the index.
func (t *Tx) scan(lo, hi string, fn func(k, v string) (more bool, err error)) (err error) {
	if err := t.begin(); err != nil {
		return err
	}
	readTo := hi
	if t.write && !t.untracked {
		defer func() { t.ranges = append(t.ranges, [2]string{lo, readTo}) }()
	}
	var mine []string
	for k := range t.buf {
		if k >= lo && k < hi {
			mine = append(mine, k)
		}
	}
	sort.Strings(mine)
	visit := func(k, v string) (bool, error) {
		more, err := fn(k, v)
		if err != nil || !more {
			readTo = k + "\x00"
		}
		return more, err
	}
	emit := func(k string) (bool, error) {
		if o := t.buf[k]; !o.del {
			return visit(k, o.val)
		}
		return true, nil
	}
	from := lo
	page := int64(pageSize)
	if t.readyPage > 0 {
		page = t.readyPage
	}
	jump := false // the last window was empty: read on to hi (window.go)
	for {
		end := hi
		if t.windowed && !jump {
			end = readyPageEnd(t.key(famReady, ""), from, hi)
		}
		resp, err := t.page(from, end, page)
		if err != nil {
			return t.fail(err)
		}
		if t.pageHook != nil {
			t.pageHook(resp.Kvs)
		}
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			for len(mine) > 0 && mine[0] <= k {
				more, err := emit(mine[0])
				if err != nil || !more {
					return err
				}
				if mine[0] == k {
					k = "" // ours replaces the snapshot's
				}
				mine = mine[1:]
			}
			if k == "" {
				continue
			}
			if more, err := visit(k, string(kv.Value)); err != nil || !more {
				return err
			}
		}
		page = pageSize
		switch {
		case resp.More && len(resp.Kvs) > 0:
			from, jump = string(resp.Kvs[len(resp.Kvs)-1].Key)+"\x00", false
		case end < hi:
			from, jump = end, len(resp.Kvs) == 0
		default:
			from = hi
		}
		if from >= hi {
			break
		}
	}
	for _, k := range mine {
		if more, err := emit(k); err != nil || !more {
			return err
		}
	}
	return nil
}

func (t *Tx) scanPrefix(fam string, fn func(k, v string) (bool, error)) error {
	p := t.key(fam, "")
	return t.scan(p, rangeEnd(p), func(k, v string) (bool, error) { return fn(k[len(p):], v) })
}

func (t *Tx) put(k, v string) { t.buf[k] = &op{val: v} }
func (t *Tx) del(k string)    { t.buf[k] = &op{del: true} }

// Now is the local clock (OpenOptions.Clock), read once: the time events
// carry. Lease expiry is etcd's (see leases.go), not this.
func (t *Tx) Now() time.Time {
	if t.now.IsZero() {
		t.now = t.s.clock()
	}
	return t.now
}

func (t *Tx) wrote()      { t.writes++ }
func (t *Tx) Writes() int { return t.writes }

// Task returns the record of id, its lease judged by etcd's clock.
//
// Only a claimed task's liveness key matters. It is read with the record
// when the record needs a request anyway (one round trip for both), and
// on its own only for a claimed task whose record was known without one:
// a claim of a task the handle's cache holds, the common case, reads
// nothing (liveness keys are never cached: cache.go).
func (t *Tx) Task(id string) (record.Task, bool, error) {
	tk, lk := t.key(famTask, id), t.key(famLive, id)
	keys := []string{tk}
	if !t.known(tk) {
		keys = append(keys, lk)
	}
	kvs, err := t.get(keys...)
	if err != nil {
		return record.Task{}, false, err
	}
	kv := kvs[tk]
	if kv == nil {
		return record.Task{}, false, nil
	}
	rec, err := journal.DecodeTask(kv.Value)
	if err != nil {
		return record.Task{}, false, fmt.Errorf("decode task %q: %w", id, err)
	}
	if rec.State != record.Claimed {
		return rec, true, nil
	}
	if _, read := kvs[lk]; !read {
		if kvs, err = t.get(lk); err != nil {
			return record.Task{}, false, err
		}
	}
	return t.judge(rec, kvs[lk]), true, nil
}

// PutTask stores rec, keeps the indexes and counts in step, and ties a
// claim's lease to etcd's clock (leases.go).
func (t *Tx) PutTask(old *record.Task, rec record.Task) error {
	t.wrote()
	if err := t.begin(); err != nil {
		return err
	}
	if old != nil {
		t.unindex(*old)
		if i := stateIndex(old.State); i >= 0 {
			t.head.Counts[i]--
		}
	}
	enc := journal.EncodeTask(rec)
	t.v2 = t.v2 || journal.IsV2(enc)
	t.put(t.key(famTask, rec.ID), string(enc))
	for _, dep := range rec.After {
		t.put(t.key(famDeps, dep+"\x00"+rec.ID), "")
	}
	if rec.Scheduled() {
		t.put(t.key(famDue, dueKey(rec.NotBefore, rec.Seq)), rec.ID)
	}
	if rec.State == record.Waiting {
		t.addMetaCount(metaWaiting, +1)
	}
	switch {
	case rec.Ready():
		t.put(t.key(famReady, readyKey(rec.Priority, rec.Seq)), rec.ID)
		for _, l := range rec.Labels {
			t.put(t.key(famLabel, l+"\x00"+readyKey(rec.Priority, rec.Seq)), rec.ID)
		}
	case rec.Blocked():
		t.addBlocked(+1)
	case rec.State == record.Claimed && rec.Lease != nil:
		t.put(t.key(famExpiry, rec.ID), expiryValue(rec.Lease.Deadline, rec.Lease.Token))
	}
	if i := stateIndex(rec.State); i >= 0 {
		t.head.Counts[i]++
	}
	t.headMod = true
	return t.tieLease(old, rec)
}

func (t *Tx) unindex(rec record.Task) {
	for _, dep := range rec.After {
		t.del(t.key(famDeps, dep+"\x00"+rec.ID))
	}
	if rec.Scheduled() {
		t.del(t.key(famDue, dueKey(rec.NotBefore, rec.Seq)))
	}
	if rec.State == record.Waiting {
		t.addMetaCount(metaWaiting, -1)
	}
	switch {
	case rec.Ready():
		t.del(t.key(famReady, readyKey(rec.Priority, rec.Seq)))
		for _, l := range rec.Labels {
			t.del(t.key(famLabel, l+"\x00"+readyKey(rec.Priority, rec.Seq)))
		}
	case rec.Blocked():
		t.addBlocked(-1)
	case rec.State == record.Claimed && rec.Lease != nil:
		t.del(t.key(famExpiry, rec.ID))
	}
}

// addBlocked moves the blocked count, kept in a meta key that begin reads
// with the head (every write moves the head, whose compare guards it).
func (t *Tx) addBlocked(d int64) { t.addMetaCount(metaBlocked, d) }

// addMetaCount moves a count kept in meta key name (absent: 0), as
// addBlocked does.
func (t *Tx) addMetaCount(name string, d int64) {
	n := int64(getU64(t.meta[name])) + d
	k := t.key(famMeta, name)
	if n == 0 {
		delete(t.meta, name)
		t.del(k)
		return
	}
	t.meta[name] = u64(uint64(n))
	t.put(k, u64(uint64(n)))
}

// Scheduled calls fn with the waiting tasks that wait for a time only,
// earliest first, reading the due index only as far as fn goes (tracked
// that far: a task scheduled meanwhile before that point makes the
// commit run again).
func (t *Tx) Scheduled(fn func(id string, at time.Time) (more bool)) error {
	p := t.key(famDue, "")
	return t.scan(p, rangeEnd(p), func(k, id string) (bool, error) { return fn(id, dueTime(k[len(p):])), nil })
}

// Blocked returns how many available tasks wait for others, from the meta
// keys begin read: O(1).
func (t *Tx) Blocked() int {
	if t.begin() != nil {
		return 0
	}
	return int(int64(getU64(t.meta[metaBlocked])))
}

// Dependents calls fn with the ids of the tasks whose After holds dep,
// reading only dep's entries (a tracked range: a dependent added
// meanwhile makes the commit run again).
func (t *Tx) Dependents(dep string, fn func(id string) (more bool)) error {
	p := t.key(famDeps, dep+"\x00")
	// The caller reads the dependents it releases: their records come
	// in one request, not a round trip each (for one, reading it on
	// demand costs the same). Restored after: a caller may ask from
	// inside another scan.
	prev := t.pageHook
	defer func() { t.pageHook = prev }()
	t.pageHook = func(kvs []*mvccpb.KeyValue) {
		if len(kvs) < 2 {
			return
		}
		ids := make([]string, 0, len(kvs))
		for _, kv := range kvs {
			ids = append(ids, string(kv.Key[len(p):]))
		}
		t.prefetch(ids)
	}
	return t.scan(p, rangeEnd(p), func(k, _ string) (bool, error) { return fn(k[len(p):]), nil })
}

// Dependencies calls fn for every entry of the dependents index.
func (t *Tx) Dependencies(fn func(dep, id string) (more bool)) error {
	return t.scanPrefix(famDeps, func(k, _ string) (bool, error) {
		i := strings.IndexByte(k, 0)
		if i < 0 {
			return false, fmt.Errorf("dependents index: key %q has no separator", k)
		}
		return fn(k[:i], k[i+1:]), nil
	})
}

// ReadyLabel calls fn with the ids of ready tasks that carry label, in
// claim order, reading only label's entries (tracked as far as fn read).
func (t *Tx) ReadyLabel(label string, fn func(id string) (more bool)) {
	p := t.key(famLabel, label+"\x00")
	_ = t.scan(p, rangeEnd(p), func(_, id string) (bool, error) { return fn(id), nil })
}

// ForEachTask calls fn for every record, in id order.
func (t *Tx) ForEachTask(fn func(record.Task) error) error {
	live, err := t.liveKeys()
	if err != nil {
		return err
	}
	return t.scanPrefix(famTask, func(id, v string) (bool, error) {
		rec, err := journal.DecodeTask([]byte(v))
		if err != nil {
			return false, fmt.Errorf("decode task %q: %w", id, err)
		}
		return true, fn(t.judge(rec, live[id]))
	})
}

// TasksFrom calls fn for each record whose id sorts after after, in id
// order, each judged by etcd's clock as Task judges it. It reads the
// records a page at a time from the key after after's, and with each page
// the liveness keys of its claimed tasks, in one more round trip: a page
// of a listing costs two requests however many tasks the journal holds.
func (t *Tx) TasksFrom(after string, fn func(record.Task) (more bool, err error)) error {
	p := t.key(famTask, "")
	lo := p
	if after != "" {
		lo = p + after + "\x00" // ids never hold a 0 byte: the first key after after's
	}
	t.pageHook = func(kvs []*mvccpb.KeyValue) {
		var keys []string
		for _, kv := range kvs {
			rec, err := journal.DecodeTask(kv.Value)
			if err != nil || rec.State != record.Claimed {
				continue
			}
			keys = append(keys, t.key(famLive, rec.ID))
		}
		for len(keys) > 0 {
			n := min(len(keys), prefetchMax)
			t.prefetchKeys(keys[:n])
			keys = keys[n:]
		}
	}
	defer func() { t.pageHook = nil }()
	return t.scan(lo, rangeEnd(p), func(k, v string) (bool, error) {
		id := k[len(p):]
		rec, err := journal.DecodeTask([]byte(v))
		if err != nil {
			return false, fmt.Errorf("decode task %q: %w", id, err)
		}
		if rec.State == record.Claimed {
			lk := t.key(famLive, id)
			kvs, err := t.get(lk)
			if err != nil {
				return false, err
			}
			rec = t.judge(rec, kvs[lk])
		}
		return fn(rec)
	})
}

// Counts returns how many tasks are in each state, from the head: O(1).
func (t *Tx) Counts() map[record.State]int {
	c := make(map[record.State]int, len(record.States))
	if t.begin() != nil {
		return c
	}
	for i, s := range headStates {
		c[s] = int(t.head.Counts[i])
	}
	c[record.Waiting] = int(int64(getU64(t.meta[metaWaiting])))
	return c
}

// Ready calls fn with the ids of available tasks in claim order (highest
// priority, then oldest), reading the index a page at a time.
//
// A claim takes the first ready task it can: the scan starts with the
// page begin read (16 keys, most claims need one; 64 for a warm handle,
// see Store.readyWindow) and reads on in pages of that size.
//
// Each page's first candidates have their records read ahead in the same
// round trip's wake (readAhead; a ready task is not claimed, so Task reads
// no liveness key of a record it knows), so the claim's Task of
// the candidate it takes costs no round trip of its own; on a page whose
// first candidates are known already (a warm handle's cache), nothing is
// read ahead (see candidatesUnknown).
func (t *Tx) Ready(fn func(id string) (more bool)) {
	t.readyScanned = true
	t.readyPage = t.firstPageSize()
	t.pageHook = func(kvs []*mvccpb.KeyValue) {
		if !t.candidatesUnknown(kvs) {
			return
		}
		keys := make([]string, 0, len(kvs))
		for _, kv := range kvs[:min(len(kvs), prefetchMax)] {
			keys = append(keys, t.key(famTask, string(kv.Value))) // no liveness keys: see beginReading
		}
		t.readAhead(keys, nil)
	}
	defer func() { t.readyPage, t.pageHook = 0, nil }()
	var visited map[string]bool
	if t.spread > 0 && t.write {
		visited = map[string]bool{}
		if t.readySpread(fn, visited) {
			return
		}
	}
	p := t.key(famReady, "")
	lo := t.readyFrom()
	t.windowed = true
	defer func() { t.windowed = false }()
	_ = t.scan(lo, rangeEnd(p), func(k, id string) (bool, error) {
		t.noteReady(k[len(p):])
		return visited[id] || fn(id), nil
	})
}

// lease is one entry of the expiry index.
type lease struct {
	id       string
	deadline time.Time
	token    uint64
}

// leases returns the claimed tasks in recorded-deadline order.
func (t *Tx) leases() ([]lease, error) {
	var out []lease
	err := t.scanPrefix(famExpiry, func(id, v string) (bool, error) {
		d, tok := decodeExpiry(v)
		out = append(out, lease{id, d, tok})
		return true, nil
	})
	slices.SortFunc(out, func(a, b lease) int {
		if c := a.deadline.Compare(b.deadline); c != 0 {
			return c
		}
		return cmp.Compare(a.token, b.token)
	})
	return out, err
}

// Expired returns the claimed tasks whose etcd lease ran out (their
// liveness key is gone), oldest recorded deadline first. now is not
// consulted: the hosts' clocks do not decide expiry on etcd.
//
// The scans are not checked at commit: what the caller does with an id it
// returns rests on reading that task (Task checks its record and liveness
// key), and a lease that expires meanwhile is simply reaped next time. So
// reaping on every claim does not make claims conflict with every other
// claim and heartbeat.
//
// The snapshot's answer is read once per transaction (a group commit asks
// once per claim in it) and then filtered by this transaction's own
// writes: a lease it ended or set since is not expired.
func (t *Tx) Expired(now time.Time) []string {
	if t.expired == nil && t.swept && !t.sweepAll {
		return nil // swept lately (sweep.go)
	}
	if t.expired == nil {
		t.sweeping = t.write
		t.untracked = true
		ls, err := t.leases()
		var live map[string]*mvccpb.KeyValue
		if err == nil {
			live, err = t.liveKeys()
		}
		t.untracked = false
		if err != nil {
			return nil
		}
		t.expired = []string{}
		for _, l := range ls {
			if !alive(live[l.id], l.token) {
				t.expired = append(t.expired, l.id)
			}
		}
	}
	var ids []string
	for _, id := range t.expired {
		if _, touched := t.buf[t.key(famExpiry, id)]; !touched {
			ids = append(ids, id)
		}
	}
	t.prefetch(ids) // the caller reaps them: it reads each
	return ids
}

// Leases calls fn for every claimed task's id in deadline order. The
// callers read each task (status, the dashboard's gauges): the records
// and liveness keys of the next leasesAhead tasks are read ahead in one
// request, not a round trip each (403 leases took status 0.13 s).
func (t *Tx) Leases(fn func(id string) error) error {
	ls, err := t.leases()
	if err != nil {
		return err
	}
	for i, l := range ls {
		if i%leasesAhead == 0 {
			ids := make([]string, 0, leasesAhead)
			for _, n := range ls[i:min(i+leasesAhead, len(ls))] {
				ids = append(ids, n.id)
			}
			t.prefetch(ids)
		}
		if err := fn(l.id); err != nil {
			return err
		}
	}
	return nil
}

// leasesAhead is how many leases' keys Leases reads ahead at a time: two
// keys each, prefetchMax in all.
const leasesAhead = prefetchMax / 2

// IndexSizes returns how many entries the ready and expiry indexes hold.
func (t *Tx) IndexSizes() (ready, expiry int) {
	_ = t.scanPrefix(famReady, func(string, string) (bool, error) { ready++; return true, nil })
	_ = t.scanPrefix(famExpiry, func(string, string) (bool, error) { expiry++; return true, nil })
	return ready, expiry
}

// Claim returns what the journal remembers of token.
func (t *Tx) Claim(token uint64) (record.Claim, bool, error) {
	k := t.key(famClaim, u64(token))
	if _, mine := t.buf[k]; !mine && t.issued[token] {
		return record.Claim{}, false, nil // issued by this run: no claim before it
	}
	kvs, err := t.get(k)
	if err != nil || kvs[k] == nil {
		return record.Claim{}, false, err
	}
	c, err := journal.DecodeClaim(kvs[k].Value)
	if err != nil {
		return record.Claim{}, false, fmt.Errorf("decode claim %d: %w", token, err)
	}
	return c, true, nil
}

// PutClaim stores c under its token.
func (t *Tx) PutClaim(c record.Claim) error {
	t.wrote()
	t.put(t.key(famClaim, u64(c.Token)), string(journal.EncodeClaim(c)))
	return nil
}

// ForEachClaim calls fn for every stored claim, in token order.
func (t *Tx) ForEachClaim(fn func(record.Claim) error) error {
	return t.scanPrefix(famClaim, func(k, v string) (bool, error) {
		c, err := journal.DecodeClaim([]byte(v))
		if err != nil {
			return false, fmt.Errorf("decode claim %d: %w", getU64(k), err)
		}
		return true, fn(c)
	})
}

func requestKey(agent, id string) string { return agent + "\x00" + id }

// Request returns the token of the current claim granted to request id of
// agent, if any.
func (t *Tx) Request(agent, id string) (uint64, bool) {
	k := t.key(famRequest, requestKey(agent, id))
	kvs, err := t.get(k)
	if err != nil || kvs[k] == nil {
		return 0, false
	}
	return getU64(string(kvs[k].Value)), true
}

// PutRequest records that request id of agent was granted token.
func (t *Tx) PutRequest(agent, id string, token uint64) error {
	t.wrote()
	t.put(t.key(famRequest, requestKey(agent, id)), u64(token))
	return nil
}

// DeleteRequest forgets request id of agent.
func (t *Tx) DeleteRequest(agent, id string) error {
	t.wrote()
	t.del(t.key(famRequest, requestKey(agent, id)))
	return nil
}

// Defaults returns the tree-wide settings chosen at init.
func (t *Tx) Defaults() (record.Defaults, error) {
	if err := t.begin(); err != nil {
		return record.Defaults{}, err
	}
	d, err := journal.DecodeDefaults([]byte(t.meta[metaDefaults]))
	if err != nil {
		return d, fmt.Errorf("decode defaults: %w", err)
	}
	return d, nil
}

// PutDefaults replaces the tree-wide settings (a meta key begin reads;
// the head's compare guards it, as every write moves the head).
func (t *Tx) PutDefaults(d record.Defaults) error {
	t.wrote()
	if err := t.begin(); err != nil {
		return err
	}
	enc := string(journal.EncodeDefaults(d))
	t.v2 = t.v2 || journal.IsV2([]byte(enc))
	t.meta[metaDefaults] = enc
	t.put(t.key(famMeta, metaDefaults), enc)
	t.headMod = true
	return nil
}

// Reset empties everything derived from the log for replay to write
// afresh; events and the token counter are kept.
func (t *Tx) Reset() error {
	t.wrote()
	for _, name := range []string{metaBlocked, metaWaiting} {
		if _, ok := t.meta[name]; ok {
			delete(t.meta, name)
			t.del(t.key(famMeta, name))
		}
	}
	for _, fam := range []string{famTask, famReady, famExpiry, famClaim, famRequest, famDeps, famLabel, famDue} {
		err := t.scanPrefix(fam, func(k, _ string) (bool, error) {
			t.del(t.key(fam, k))
			return true, nil
		})
		if err != nil {
			return err
		}
	}
	t.head.Counts = [4]int64{}
	t.headMod = true
	return nil
}

// Check compares the head's counts with the records.
func (t *Tx) Check() []error {
	var errs []error
	n := [4]int64{}
	waiting := 0
	err := t.scanPrefix(famTask, func(id, v string) (bool, error) {
		rec, err := journal.DecodeTask([]byte(v))
		if err != nil {
			errs = append(errs, fmt.Errorf("task %q: %w", id, err))
		} else if i := stateIndex(rec.State); i >= 0 {
			n[i]++
		} else if rec.State == record.Waiting {
			waiting++
		}
		return true, nil
	})
	if err != nil {
		return append(errs, err)
	}
	if n != t.head.Counts {
		errs = append(errs, fmt.Errorf("head counts %v, records %v", t.head.Counts, n))
	}
	if w := int(int64(getU64(t.meta[metaWaiting]))); w != waiting {
		errs = append(errs, fmt.Errorf("waiting count %d, records %d", w, waiting))
	}
	return errs
}
