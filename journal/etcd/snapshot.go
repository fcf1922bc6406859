package etcd

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
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
	pages   map[pageKey]*clientv3.GetResponse
	extra   []*etcdserverpb.ResponseOp // the answers to readSnapshot's extra reads
}

// readSnapshot reads a snapshot: expiry and liveness pages for the reap
// every claim does first, the ready page for claim-next.
//
// extra are more reads to make at the same revision, in the same request;
// their answers are in the snapshot's extra. readyPage is the size of the
// ready index's first page.
func (b *Backend) readSnapshot(ctx context.Context, extra []clientv3.Op, readyPage int64) (*snapshot, error) {
	metaKey := b.cfg.Prefix + famMeta
	ops := []clientv3.Op{clientv3.OpGet(metaKey, clientv3.WithPrefix())}
	var pre []pageKey
	for _, f := range []struct {
		fam   string
		limit int64
	}{{famExpiry, pageSize}, {famLive, pageSize}, {famReady, readyPage}, {famDue, pageSize}} {
		lo := b.cfg.Prefix + f.fam
		pre = append(pre, pageKey{lo, rangeEnd(lo), f.limit})
		ops = append(ops, clientv3.OpGet(lo, clientv3.WithRange(rangeEnd(lo)), clientv3.WithLimit(f.limit)))
	}
	first := len(ops)
	ops = append(ops, extra...)
	resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	s := &snapshot{rev: resp.Header.Revision, meta: map[string]string{}, pages: map[pageKey]*clientv3.GetResponse{}, extra: resp.Responses[first:]}
	for i, k := range pre {
		s.pages[k] = (*clientv3.GetResponse)(resp.Responses[i+1].GetResponseRange())
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		name := string(kv.Key[len(metaKey):])
		s.meta[name] = string(kv.Value)
		switch name {
		case metaHead:
			s.headRev = kv.ModRevision
		case metaVersion:
			s.verRev = kv.ModRevision
		}
	}
	return s, nil
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
