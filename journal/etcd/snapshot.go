package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
)

// Exists reads what a transaction's begin reads (one request: the meta
// keys and the first pages of the indexes) and keeps it for a moment, so
// that Open can check the journal it just found without a request of its
// own: a CLI command starts with Exists, then Open.
//
// Transactions never start from it. An earlier version let a process's
// first write start from it (two round trips fewer per command, the commit
// checking everything read): the etcd kill storm then adopted inbox files
// twice, which no test of the cheaper path had shown, so every transaction
// reads its own snapshot.

// warmMaxAge bounds how old the kept snapshot may be when Open checks the
// journal with it.
const warmMaxAge = 250 * time.Millisecond

// snapshot is what begin reads in one request: the meta keys and the
// first page of the indexes most transactions scan, at one revision.
type snapshot struct {
	rev     int64
	meta    map[string]string
	headRev int64
	pages   map[pageKey]*clientv3.GetResponse
	at      time.Time
}

// readSnapshot reads a snapshot: expiry and liveness pages for the reap
// every claim does first, the ready page for claim-next.
func (b *Backend) readSnapshot(ctx context.Context) (*snapshot, error) {
	metaKey := b.cfg.Prefix + famMeta
	ops := []clientv3.Op{clientv3.OpGet(metaKey, clientv3.WithPrefix())}
	var pre []pageKey
	for _, f := range []struct {
		fam   string
		limit int64
	}{{famExpiry, pageSize}, {famLive, pageSize}, {famReady, firstReadyPage}} {
		lo := b.cfg.Prefix + f.fam
		pre = append(pre, pageKey{lo, rangeEnd(lo), f.limit})
		ops = append(ops, clientv3.OpGet(lo, clientv3.WithRange(rangeEnd(lo)), clientv3.WithLimit(f.limit)))
	}
	resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	s := &snapshot{rev: resp.Header.Revision, meta: map[string]string{}, pages: map[pageKey]*clientv3.GetResponse{}, at: time.Now()}
	for i, k := range pre {
		s.pages[k] = (*clientv3.GetResponse)(resp.Responses[i+1].GetResponseRange())
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		name := string(kv.Key[len(metaKey):])
		s.meta[name] = string(kv.Value)
		if name == metaHead {
			s.headRev = kv.ModRevision
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
	case v != SchemaVersion:
		return &journal.VersionError{Path: b.cfg.URL(), Found: v, Supported: SchemaVersion}
	}
	return nil
}

// keepWarm keeps s for Open.
func (b *Backend) keepWarm(s *snapshot) {
	b.warmMu.Lock()
	b.warm = s
	b.warmMu.Unlock()
}

// peekWarm returns the warm snapshot if it is young enough, keeping it.
func (b *Backend) peekWarm() *snapshot {
	b.warmMu.Lock()
	defer b.warmMu.Unlock()
	if b.warm != nil && time.Since(b.warm.at) > warmMaxAge {
		b.warm = nil
	}
	return b.warm
}
