package etcd

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
)

// The warm snapshot: one request instead of three at the start of a
// command.
//
// A CLI command asks Exists (is there a journal?), then Open (is it one we
// read?), then begins its first transaction: three round trips that read
// the same meta keys. So Exists reads what a transaction's begin reads
// (the meta keys and the first pages of the indexes, at one revision) and
// keeps it; Open checks the journal from it, and the process's first
// write transaction starts from it if it is younger than warmMaxAge.
//
// A slightly old snapshot is safe for a write that commits: the commit
// checks the mod revision of everything read, so a change since the
// snapshot fails it and the function runs again on a fresh one. A run that
// does not commit (a refusal, or nothing to write) has nothing checked, so
// Update runs it again on a fresh snapshot before answering: an answer is
// never older than the call. Views never use it, for the same reason.

// warmMaxAge bounds how old a warm snapshot may be when a write starts
// from it: past it, a conflict is likely, and a fresh read is cheaper.
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

// keepWarm keeps s for the first write transaction.
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

// takeWarm hands the warm snapshot to one transaction: it is used once,
// and only if it shows a journal (a snapshot from before Create would
// only fail the run).
func (b *Backend) takeWarm() *snapshot {
	s := b.peekWarm()
	b.keepWarm(nil)
	if s == nil || b.checkMeta(s.meta) != nil {
		return nil
	}
	return s
}
