package etcd

import (
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
)

// Reading a group's keys in one round trip. On etcd every read the
// operations of a group commit make is a request: a complete reads its
// task's record and liveness key, then the first page of its dependents;
// sixteen completes in a group made 32 requests, one after another, and
// the group's commit waited for all of them. Prefetch reads all of that
// in one request before the operations run (fence calls it with the ids
// the group names), and get and scan then find the keys and pages here.
//
// Nothing read ahead is checked at commit until an operation reads it
// (get tracks the keys it hands out; scan tracks the range it read), so
// reading ahead makes no transaction conflict that reading on demand
// would not.

var _ journal.Prefetcher = (*Tx)(nil)

// Prefetch reads ahead, in one request (more only past prefetchMax
// operations), the records and liveness keys of ids and the first page of
// each id's dependents; with claims, also the records and liveness keys
// of the first ready page's tasks (the candidates a claim looks at
// first). A failed read ahead is forgotten.
func (t *Tx) Prefetch(ids []string, claims bool) {
	if t.begin() != nil {
		return
	}
	t.scanLiveIfRead()
	var points []string
	seen := map[string]bool{}
	point := func(k string) {
		if seen[k] || t.known(k) {
			return
		}
		seen[k] = true
		points = append(points, k)
	}
	var deps []pageKey
	for _, id := range ids {
		point(t.key(famTask, id))
		point(t.key(famLive, id))
		p := t.key(famDeps, id+"\x00")
		if k := (pageKey{p, rangeEnd(p), pageSize}); t.pages[k] == nil && !seen[p] {
			seen[p] = true
			deps = append(deps, k)
		}
	}
	if claims {
		if r := t.pages[t.firstReadyPageKey()]; r != nil {
			for _, kv := range r.Kvs {
				point(t.key(famTask, string(kv.Value)))
				point(t.key(famLive, string(kv.Value)))
			}
		}
	}
	for len(points)+len(deps) > 0 {
		var ops []clientv3.Op
		n := min(len(points), prefetchMax)
		for _, k := range points[:n] {
			ops = append(ops, clientv3.OpGet(k, t.pinned()...))
		}
		m := min(len(deps), prefetchMax-n)
		for _, d := range deps[:m] {
			ops = append(ops, clientv3.OpGet(d.from, append(t.pinned(), clientv3.WithRange(d.hi), clientv3.WithLimit(d.limit))...))
		}
		t.requests++
		resp, err := t.s.b.cli.Txn(t.ctx).Then(ops...).Commit()
		if err != nil {
			return
		}
		if t.fetched == nil {
			t.fetched = map[string]*mvccpb.KeyValue{}
		}
		for i, k := range points[:n] {
			var kv *mvccpb.KeyValue
			if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
				kv = kvs[0]
			}
			t.fetched[k] = kv
		}
		for i, d := range deps[:m] {
			t.pages[d] = (*clientv3.GetResponse)(resp.Responses[n+i].GetResponseRange())
		}
		points, deps = points[n:], deps[m:]
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
		return t.liveScan != nil
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
	lo := t.key(famReady, "")
	return pageKey{lo, rangeEnd(lo), firstReadyPage}
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
