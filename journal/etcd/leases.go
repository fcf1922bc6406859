package etcd

import (
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
// seconds the etcd lease was granted with (a heartbeat of the same length
// only sends a keepalive).
func liveValue(token uint64, ttl int64) string { return u64(token) + u64(uint64(ttl)) }

// alive reports whether kv, the liveness key of a task, holds token.
func alive(kv *mvccpb.KeyValue, token uint64) bool {
	return kv != nil && len(kv.Value) >= 8 && getU64(string(kv.Value[:8])) == token
}

// grantedTTL returns the TTL the liveness key's lease was granted with.
func grantedTTL(kv *mvccpb.KeyValue) int64 {
	if kv == nil || len(kv.Value) != 16 {
		return 0
	}
	return int64(getU64(string(kv.Value[8:])))
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
func (t *Tx) liveKeys() (map[string]*mvccpb.KeyValue, error) {
	out := map[string]*mvccpb.KeyValue{}
	err := t.scanPrefix(famLive, func(id, v string) (bool, error) {
		k := t.key(famLive, id)
		kv := &mvccpb.KeyValue{Key: []byte(k), Value: []byte(v)}
		if o, ok := t.buf[k]; ok {
			kv.Lease = int64(o.lease)
		}
		out[id] = kv
		return true, nil
	})
	return out, err
}

// ttlSeconds is an etcd lease TTL for d: whole seconds, rounded up.
func ttlSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// tieLease keeps the liveness key in step with rec, a task just written:
// a new claim (or a heartbeat that changes the lease's length) gets a new
// etcd lease; a heartbeat of the same length keeps the lease alive; a
// lease that ended loses its key. A keepalive that finds the lease gone
// runs the transaction again, which then sees the lease expired.
func (t *Tx) tieLease(old *record.Task, rec record.Task) error {
	lk := t.key(famLive, rec.ID)
	var had *mvccpb.KeyValue
	if old != nil && old.State == record.Claimed && old.Lease != nil {
		if kv, ok := t.live[rec.ID]; ok {
			had = kv
		} else {
			kvs, err := t.get(lk)
			if err != nil {
				return err
			}
			had = kvs[lk]
		}
	}
	holding := rec.State == record.Claimed && rec.Lease != nil
	if !holding {
		if had != nil {
			t.del(lk)
			t.revoke = append(t.revoke, clientv3.LeaseID(had.Lease))
		}
		return nil
	}
	ttl := ttlSeconds(rec.Lease.TTL)
	if rec.Lease.TTL <= 0 {
		ttl = ttlSeconds(rec.Lease.Deadline.Sub(rec.Lease.ClaimedAt))
	}
	if had != nil && had.Lease != 0 && alive(had, rec.Lease.Token) && old.Lease.Token == rec.Lease.Token {
		id := clientv3.LeaseID(had.Lease)
		if grantedTTL(had) == ttl {
			if _, err := t.s.b.cli.KeepAliveOnce(t.ctx, id); err != nil {
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					return t.fail(errConflict)
				}
				return t.fail(err)
			}
			return nil
		}
		t.revoke = append(t.revoke, id)
	}
	g, err := t.s.b.cli.Grant(t.ctx, ttl)
	if err != nil {
		return t.fail(err)
	}
	t.granted = append(t.granted, g.ID)
	t.buf[lk] = &op{val: liveValue(rec.Lease.Token, ttl), lease: g.ID}
	return nil
}
