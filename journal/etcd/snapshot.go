package etcd

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
)

// snapshot is what begin reads in one request: the meta keys and the
// first page of the indexes most transactions scan, at one revision.
type snapshot struct {
	rev     int64
	meta    map[string]string
	headRev int64
	verRev  int64 // the version key's mod revision
	// floor is the ready index's floor (floor.go): "" when the journal
	// has none or an older fencectl's commit left it stale.
	floor string
	// swept: a sweep of the expiry index ran lately (sweep.go), and the
	// expiry, liveness and note pages were not read.
	swept bool
	pages map[pageKey]*clientv3.GetResponse
	extra []*etcdserverpb.ResponseOp // the answers to readSnapshot's extra reads
	// queued is how many writers wait in the writers' queue (queue.go):
	// an optimistic commit would fail on it.
	queued int64
}

// readSnapshot reads a snapshot: expiry and liveness pages for the reap
// every claim does first, and the notes of dependents left to release
// (unless a sweep ran lately: sweep.go, unblock.go), the ready
// page for claim-next.
//
// extra are more reads to make at the same revision, in the same request;
// their answers are in the snapshot's extra. The ready index's first page
// (readyPage keys) is read from readyFrom, a ready key (relative to the
// family): the floor as this handle last saw it (floor.go).
func (b *Backend) readSnapshot(ctx context.Context, extra []clientv3.Op, readyPage int64, readyFrom string) (*snapshot, error) {
	p := b.cfg.Prefix
	metaKey := p + famMeta
	type family struct {
		lo, hi string
		limit  int64
	}
	pagesOf := func(fams []family) ([]pageKey, []clientv3.Op) {
		keys := []pageKey{}
		ops := []clientv3.Op{clientv3.OpGet(metaKey, clientv3.WithPrefix())}
		for _, f := range fams {
			keys = append(keys, pageKey{f.lo, f.hi, f.limit})
			ops = append(ops, clientv3.OpGet(f.lo, clientv3.WithRange(f.hi), clientv3.WithLimit(f.limit)))
		}
		// Last, after extra: how many wait in the writers' queue.
		queue := clientv3.OpGet(p+keyWriters+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return keys, append(append(ops, extra...), queue)
	}
	ready := p + famReady + readyFrom
	common := []family{
		{p + famDue, rangeEnd(p + famDue), pageSize},
		{ready, readyPageEnd(p+famReady, ready, rangeEnd(p+famReady)), readyPage},
	}
	sweptKeys, sweptOps := pagesOf(common)
	expiry := []family{{p + famExpiry, rangeEnd(p + famExpiry), pageSize}, {p + famLive, rangeEnd(p + famLive), pageSize},
		{p + famUnblock, rangeEnd(p + famUnblock), pageSize}}
	fullKeys, fullOps := pagesOf(append(expiry, common...))
	// Both branches carry every read: a nested transaction would send
	// them once, but etcd runs a request holding one through consensus
	// as a write.
	resp, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(metaKey+metaSweep), ">", 0)).
		Then(sweptOps...).Else(fullOps...).Commit()
	if err != nil {
		return nil, err
	}
	pre := fullKeys
	if resp.Succeeded {
		pre = sweptKeys
	}
	first := len(pre) + 1
	last := len(resp.Responses) - 1
	s := &snapshot{rev: resp.Header.Revision, pages: map[pageKey]*clientv3.GetResponse{}, extra: resp.Responses[first:last], swept: resp.Succeeded,
		queued: resp.Responses[last].GetResponseRange().GetCount()}
	for i, k := range pre {
		s.pages[k] = (*clientv3.GetResponse)(resp.Responses[i+1].GetResponseRange())
	}
	m := parseMeta(resp.Responses[0].GetResponseRange().Kvs, metaKey)
	s.meta, s.headRev, s.verRev, s.floor = m.values, m.headRev, m.verRev, m.floor
	return s, nil
}

// metaKeys are the meta keys as one read found them.
type metaKeys struct {
	values          map[string]string
	headRev, verRev int64  // the head's and the version key's mod revisions
	floor           string // the trusted floor (floor.go)
}

// parseMeta reads the meta keys kvs (under metaKey).
func parseMeta(kvs []*mvccpb.KeyValue, metaKey string) metaKeys {
	m := metaKeys{values: map[string]string{}}
	var floorRev int64
	for _, kv := range kvs {
		name := string(kv.Key[len(metaKey):])
		m.values[name] = string(kv.Value)
		switch name {
		case metaHead:
			m.headRev = kv.ModRevision
		case metaVersion:
			m.verRev = kv.ModRevision
		case metaFloor:
			floorRev = kv.ModRevision
		}
	}
	m.floor = trustedFloor(m.values, floorRev, m.headRev)
	return m
}

// checkMeta reports a journal that is absent or of another schema.
func (b *Backend) checkMeta(meta map[string]string) error {
	v, ok := meta[metaVersion]
	switch {
	case !ok:
		return fmt.Errorf("%w at %s", journal.ErrNoJournal, b.cfg.URL())
	case v != SchemaVersion && v != foldedVersion && !slices.Contains(readVersions, v):
		return &journal.VersionError{Path: b.cfg.URL(), Found: v, Supported: SchemaVersion}
	}
	return nil
}
