package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal/record"
)

// Leases on etcd's clock (see the package doc): P/l/ID holds the claim's
// token and is attached to an etcd lease of the claim's TTL.

// MinTTL is the shortest lease etcd keeps as asked: its lease TTLs are
// whole seconds, and a server raises any TTL below 1.5 election timeouts
// (2 s with etcd's default 1 s election timeout) to that minimum, so a
// shorter --ttl runs for this long at least.
const MinTTL = 2 * time.Second

// liveValue is P/l/ID's value: the claim's token, then the TTL in
// seconds the claim asked for.
func liveValue(token uint64, ttl int64) string { return u64(token) + u64(uint64(ttl)) }

// alive reports whether kv, the liveness key of a task, holds token.
func alive(kv *mvccpb.KeyValue, token uint64) bool {
	return kv != nil && len(kv.Value) >= 8 && getU64(string(kv.Value[:8])) == token
}

// judge makes rec's deadline tell what etcd's clock says: a lease whose
// liveness key is gone has expired (its deadline is not after now),
// one whose key lives has not (its deadline is after now), whatever the
// host that wrote the record believed.
func (t *Tx) judge(rec record.Task, live *mvccpb.KeyValue) record.Task {
	if rec.State != record.Claimed || rec.Lease == nil {
		return rec
	}
	now := t.Now()
	l := *rec.Lease
	switch ok := alive(live, l.Token); {
	case !ok && l.Deadline.After(now):
		l.Deadline = now
	case ok && !l.Deadline.After(now):
		l.Deadline = now.Add(time.Second)
	default:
		return rec
	}
	rec.Lease = &l
	return rec
}

// liveKeys returns every liveness key, by task id.
//
// The snapshot's keys (with their mod revisions) are kept for the
// transaction: get answers a liveness key from them without a round trip
// (liveness keys are never taken from the store's cache: etcd deletes
// them without touching the head).
func (t *Tx) liveKeys() (map[string]*mvccpb.KeyValue, error) {
	if t.liveScan == nil {
		scan := map[string]*mvccpb.KeyValue{}
		p := t.key(famLive, "")
		from, hi := p, rangeEnd(p)
		for {
			resp, err := t.page(from, hi, pageSize)
			if err != nil {
				return nil, t.fail(err)
			}
			for _, kv := range resp.Kvs {
				scan[string(kv.Key[len(p):])] = kv
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
		t.liveScan = scan
	}
	out := make(map[string]*mvccpb.KeyValue, len(t.liveScan))
	for id, kv := range t.liveScan {
		out[id] = kv
	}
	p := t.key(famLive, "")
	for k, o := range t.buf {
		if len(k) > len(p) && k[:len(p)] == p {
			if o.del {
				delete(out, k[len(p):])
			} else {
				out[k[len(p):]] = &mvccpb.KeyValue{Key: []byte(k), Value: []byte(o.val), Lease: int64(o.lease)}
			}
		}
	}
	return out, nil
}

// ttlSeconds is an etcd lease TTL for d: whole seconds, rounded up.
func ttlSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// tieLease keeps the liveness key in step with rec, a task just written:
// a claim or heartbeat puts it under a lease that runs at least the
// claim's TTL from now on etcd's clock (see pooledLease); a lease that
// ended loses its key. The transaction's compare on the key (Task read
// it) makes a heartbeat of a lease etcd expired meanwhile run again, and
// then refuse.
func (t *Tx) tieLease(old *record.Task, rec record.Task) error {
	lk := t.key(famLive, rec.ID)
	if rec.State != record.Claimed || rec.Lease == nil {
		if old != nil && old.State == record.Claimed {
			t.del(lk)
		}
		return nil
	}
	ttl := ttlSeconds(rec.Lease.TTL)
	if rec.Lease.TTL <= 0 {
		ttl = ttlSeconds(rec.Lease.Deadline.Sub(rec.Lease.ClaimedAt))
	}
	id, at, err := t.s.b.pooledLease(t.ctx, ttl)
	if err != nil {
		return t.fail(err)
	}
	// etcd keeps the lease until at+ttl+leaseWindow at least: the handle
	// may take the key from its cache until at+ttl (cache.go).
	t.buf[lk] = &op{val: liveValue(rec.Lease.Token, ttl), lease: id, until: at.Add(time.Duration(ttl) * time.Second)}
	return nil
}

// leaseWindow is how long a granted lease is handed to new claims and
// heartbeats of its TTL. It is granted for TTL + leaseWindow, so a claim
// that gets it at any moment of the window holds at least its TTL, and at
// most a window more: one grant (a consensus round) per TTL per window
// instead of one per claim and heartbeat.
const leaseWindow = time.Second

type pooled struct {
	id clientv3.LeaseID
	at time.Time // when granted, on this host's monotonic clock
}

// pooledLease returns a lease that etcd keeps for at least ttl seconds
// from now, and when (on this host's monotonic clock) it was asked for:
// etcd keeps it for ttl + leaseWindow from then at least. Only the
// monotonic clock's rate takes part (how long ago the lease was
// granted), never the wall clock.
func (b *Backend) pooledLease(ctx context.Context, ttl int64) (clientv3.LeaseID, time.Time, error) {
	b.poolMu.Lock()
	defer b.poolMu.Unlock()
	if p, ok := b.pool[ttl]; ok && time.Since(p.at) < leaseWindow {
		return p.id, p.at, nil
	}
	start := time.Now()
	g, err := b.cli.Grant(ctx, ttl+int64(leaseWindow/time.Second))
	if err != nil {
		return 0, time.Time{}, err
	}
	if b.pool == nil {
		b.pool = map[int64]pooled{}
	}
	b.pool[ttl] = pooled{g.ID, start}
	return g.ID, start, nil
}

// dropLease forgets a pooled lease etcd no longer has.
func (b *Backend) dropLease(id clientv3.LeaseID) {
	b.poolMu.Lock()
	defer b.poolMu.Unlock()
	for ttl, p := range b.pool {
		if p.id == id {
			delete(b.pool, ttl)
		}
	}
}
