package etcd

import (
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reading a group's keys in one round trip. On etcd every read the
// operations of a group commit make is a request: a complete reads its
// task's record and liveness key, then the first page of its dependents;
// sixteen completes in a group made 32 requests, one after another, and
// the group's commit waited for all of them. beginReading reads all that
// in the request that begins the transaction (fence names the ids through
// journal.Prefetcher), and get and scan then find the keys and pages here.
//
// Nothing read ahead is checked at commit until an operation reads it
// (get tracks the keys it hands out; scan tracks the range it read), so
// reading ahead makes no transaction conflict that reading on demand
// would not.

// beginReading begins the transaction (begin) and reads ahead, in the
// same request, the records and liveness keys of ids and the first page
// of each id's dependents; with claims, then the records of the first
// ready page's tasks (the candidates a claim looks at first), in one more
// request, since their ids come with the snapshot, unless the cache knows
// them already (candidatesUnknown). A transaction begun on a prepared
// snapshot (prepared.go) reads all that in that one more request, what
// of it is not known. A failed read ahead is forgotten; a failed begin is
// begin's error.
func (t *Tx) beginReading(ids []string, claims bool) error {
	var points []string
	var deps []pageKey
	seen := map[string]bool{}
	for _, id := range ids {
		for _, k := range []string{t.key(famTask, id), t.key(famLive, id)} {
			if !seen[k] {
				seen[k] = true
				points = append(points, k)
			}
		}
		p := t.key(famDeps, id+"\x00")
		if !seen[p] {
			seen[p] = true
			deps = append(deps, pageKey{p, rangeEnd(p), pageSize})
		}
	}
	// etcd answers at most 128 operations a request (its default
	// --max-txn-ops): begin's own four, and prefetchMax more at most.
	n := min(len(points), prefetchMax)
	m := min(len(deps), prefetchMax-n)
	extra := t.readOps(points[:n], deps[:m])
	answers, err := t.beginWith(extra)
	if tooManyOps(err) {
		// A server started with a --max-txn-ops below begin's reads and
		// these: begin alone, and read them ahead in smaller requests.
		t.err, n, m = nil, 0, 0
		answers, err = t.beginWith(nil)
	}
	if err != nil {
		return err
	}
	if len(answers) != n+m {
		n, m = 0, 0 // begun on a prepared snapshot: read below, what is not known
	}
	t.keepAhead(points[:n], deps[:m], answers)
	t.scanLiveIfRead()
	rest := points[n:]
	if r := t.pages[t.firstReadyPageKey()]; claims && r != nil && t.candidatesUnknown(r.Kvs) {
		for _, kv := range r.Kvs {
			// A ready task is not claimed: Task reads no liveness key
			// of a record it knows, so none is read ahead.
			rest = append(rest, t.key(famTask, string(kv.Value)))
		}
	}
	t.readAhead(rest, deps[m:])
	return nil
}

// candidatesUnknown reports whether get would need a request for the
// keys of a claim's first candidates (the first firstReadyPage tasks of
// the ready page kvs). Only then is the whole page read ahead: a warm
// handle's page is wider (Store.readyWindow), and reading its far end
// ahead in every group would cost each group a request for the few tasks
// that came into the window since the last.
func (t *Tx) candidatesUnknown(kvs []*mvccpb.KeyValue) bool {
	for _, kv := range kvs[:min(len(kvs), firstReadyPage)] {
		if !t.known(t.key(famTask, string(kv.Value))) {
			return true // (a ready task is not claimed: its liveness key is not read, see Task)
		}
	}
	return false
}

// readOps are the reads of points and of the first page of each of deps,
// at the snapshot (once there is one).
func (t *Tx) readOps(points []string, deps []pageKey) []clientv3.Op {
	var opts []clientv3.OpOption
	if t.rev != 0 {
		opts = t.pinned()
	}
	ops := make([]clientv3.Op, 0, len(points)+len(deps))
	for _, k := range points {
		ops = append(ops, clientv3.OpGet(k, opts...))
	}
	for _, d := range deps {
		ops = append(ops, clientv3.OpGet(d.from, append(opts, clientv3.WithRange(d.hi), clientv3.WithLimit(d.limit))...))
	}
	return ops
}

// keepAhead files the answers to readOps(points, deps) for get and scan
// to find.
func (t *Tx) keepAhead(points []string, deps []pageKey, answers []*etcdserverpb.ResponseOp) {
	if len(answers) != len(points)+len(deps) {
		return
	}
	if t.fetched == nil {
		t.fetched = map[string]*mvccpb.KeyValue{}
	}
	for i, k := range points {
		var kv *mvccpb.KeyValue
		if kvs := answers[i].GetResponseRange().Kvs; len(kvs) > 0 {
			kv = kvs[0]
		}
		if _, mine := t.buf[k]; !mine {
			t.fetched[k] = kv
			if t.cached && !t.isLive(k) {
				t.s.cachePut(t.headRev, k, kv)
			}
		}
	}
	for i, d := range deps {
		t.pages[d] = (*clientv3.GetResponse)(answers[len(points)+i].GetResponseRange())
	}
}

// readAhead reads what of points and deps get and scan would not find
// without a request, prefetchMax operations a request, or half as many
// each time a server with a lower --max-txn-ops refuses a request.
func (t *Tx) readAhead(points []string, deps []pageKey) {
	var ps []string
	for _, k := range points {
		if !t.known(k) && !slices.Contains(ps, k) {
			ps = append(ps, k)
		}
	}
	var ds []pageKey
	for _, d := range deps {
		if _, cached := t.cachedPage(d); t.pages[d] == nil && !cached {
			ds = append(ds, d)
		}
	}
	size := prefetchMax
	for len(ps)+len(ds) > 0 {
		n := min(len(ps), size)
		m := min(len(ds), size-n)
		t.requests++
		resp, err := t.s.b.cli.Txn(t.ctx).Then(t.readOps(ps[:n], ds[:m])...).Commit()
		if tooManyOps(err) && size > 1 {
			size /= 2
			continue
		}
		if err != nil {
			return
		}
		t.keepAhead(ps[:n], ds[:m], resp.Responses)
		ps, ds = ps[n:], ds[m:]
	}
}

// known reports whether get would answer for k without a request: this
// transaction wrote it, read it, has it read ahead, or (liveness keys)
// scanned them all, or (other keys) finds it in the store's cache.
func (t *Tx) known(k string) bool {
	if _, ok := t.buf[k]; ok {
		return true
	}
	if _, ok := t.fetched[k]; ok {
		return true
	}
	if _, ok := t.reads[k]; ok {
		return true
	}
	if t.isLive(k) {
		if t.liveScan != nil {
			return true
		}
		if t.liveCached() {
			_, ok := t.s.cacheGetLive(k)
			return ok
		}
		return false
	}
	if t.cached {
		_, ok := t.s.cacheGet(k)
		return ok
	}
	return false
}

// isLive reports whether k is a liveness key.
func (t *Tx) isLive(k string) bool {
	p := t.key(famLive, "")
	return len(k) > len(p) && k[:len(p)] == p
}

// firstReadyPageKey names the ready index's first page as begin reads it.
func (t *Tx) firstReadyPageKey() pageKey {
	p := t.key(famReady, "")
	return pageKey{p + t.floor, readyPageEnd(p, p+t.floor, rangeEnd(p)), t.firstPageSize()}
}

// scanLiveIfRead fills the transaction's view of every liveness key from
// the page begin read, when that page holds them all (fewer claims than a
// page): then no liveness key costs a request of its own.
func (t *Tx) scanLiveIfRead() {
	if t.liveScan != nil {
		return
	}
	p := t.key(famLive, "")
	if r := t.pages[pageKey{p, rangeEnd(p), pageSize}]; r != nil && !r.More {
		_, _ = t.liveKeys() // the page is there: no request
	}
}
