package etcd

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The handle's cache of point keys (task records, liveness keys, claims,
// requests).
//
// Every write transaction rewrites the head key, so while the head's mod
// revision is still that of this handle's last commit, nobody else has
// written, and what this handle last read or wrote of a key is what etcd
// holds: a transaction then reads it from memory. The one change that
// does not go through the head, etcd deleting a liveness key when its
// lease runs out, is why liveness keys are not cached with the others (a
// View has no commit to catch a stale one). A failed commit drops the
// cache. So the cache saves round trips, never correctness: every key
// read is still checked at commit.
//
// Two more things are kept beside the point keys, for write transactions
// of a handle that commits group after group (prepared.go):
//
//   - the liveness keys this handle wrote, each until its etcd lease can
//     run out at the earliest (its grant, on this host's monotonic clock,
//     plus the claim's TTL). Only a write transaction takes one, and
//     marks itself unverified: its commit compares the key as it does
//     any other, and a run that commits nothing is made again on reads
//     of its own (Store.UpdateReading), so a key etcd deleted anyway (an
//     operator's, or a test's ExpireLease) costs a run, never a wrong
//     outcome.
//   - the whole dependents index P/d/, when one read found it small: a
//     complete looks for its task's dependents, and most tasks have none.
//     It is kept as the point keys are (this handle's commits applied).

// cacheLimit bounds the cache; past it, it starts afresh.
const cacheLimit = 1 << 16

// cacheValid reports whether the cache holds the state at head revision
// headRev, and drops it if not.
func (s *Store) cacheValid(headRev int64) bool {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.cacheRev != 0 && s.cacheRev == headRev {
		return true
	}
	s.resetCacheLocked(headRev)
	return headRev != 0
}

// resetCacheLocked empties the cache, now valid for head revision rev (0:
// for none); cacheMu is held.
func (s *Store) resetCacheLocked(rev int64) {
	s.cacheRev, s.cacheKV, s.warm = rev, nil, false
	s.liveKV, s.depsKV = nil, nil
}

// liveEntry is a liveness key this handle wrote (nil kv: it deleted it),
// trusted until until (see above).
type liveEntry struct {
	kv    *mvccpb.KeyValue
	until time.Time
}

// cacheGetLive returns the liveness key k as this handle last wrote it,
// if it is cached and its lease cannot have run out yet.
func (s *Store) cacheGetLive(k string) (*mvccpb.KeyValue, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	e, ok := s.liveKV[k]
	if !ok || e.kv != nil && !time.Now().Before(e.until) {
		return nil, false
	}
	return e.kv, true
}

// keepDeps records kvs as the whole dependents index at head revision
// headRev, if the cache still holds the state at that head.
func (s *Store) keepDeps(headRev int64, kvs []*mvccpb.KeyValue) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if headRev == 0 || s.cacheRev != headRev {
		return
	}
	s.depsKV = make(map[string]*mvccpb.KeyValue, len(kvs))
	for _, kv := range kvs {
		s.depsKV[string(kv.Key)] = kv
	}
}

// depsKnown reports whether the cache holds the whole dependents index.
func (s *Store) depsKnown() bool {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.depsKV != nil
}

// depsPage answers a read of [from, hi), inside the dependents index, of
// at most limit keys, from the cache; ok is false if it does not hold the
// index.
func (s *Store) depsPage(from, hi string, limit int64) (*clientv3.GetResponse, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.depsKV == nil {
		return nil, false
	}
	var kvs []*mvccpb.KeyValue
	for k, kv := range s.depsKV {
		if k >= from && k < hi {
			kvs = append(kvs, kv)
		}
	}
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	r := &clientv3.GetResponse{Count: int64(len(kvs))}
	if limit > 0 && int64(len(kvs)) > limit {
		kvs, r.More = kvs[:limit], true
	}
	r.Kvs = kvs
	return r, true
}

// cacheGet returns the cached kv of k (nil: absent) and whether k is
// known.
func (s *Store) cacheGet(k string) (*mvccpb.KeyValue, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	kv, ok := s.cacheKV[k]
	return kv, ok
}

// cachePut records kv (nil: absent), read at a snapshot whose head had
// mod revision headRev, as k's state, if the cache still holds the state
// at that head: a transaction of this handle may have committed since
// the read (another goroutine's group, say), and then kv may be older
// than what the cache holds.
func (s *Store) cachePut(headRev int64, k string, kv *mvccpb.KeyValue) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if headRev == 0 || s.cacheRev != headRev {
		return
	}
	if s.cacheKV == nil || len(s.cacheKV) >= cacheLimit {
		s.cacheKV = map[string]*mvccpb.KeyValue{}
	}
	s.cacheKV[k] = kv
}

// cacheCommitted applies t's writes, committed at revision rev. The cache
// stays valid only if t held the head (nobody wrote between its snapshot
// and its commit) and moved it (the head's mod revision is now rev).
func (s *Store) cacheCommitted(t *Tx, rev int64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if !t.cached || !t.headMod {
		s.resetCacheLocked(0)
		return
	}
	s.warm = true
	if s.cacheKV == nil || len(s.cacheKV)+len(t.buf) >= cacheLimit {
		s.cacheKV = map[string]*mvccpb.KeyValue{}
	}
	if s.liveKV == nil || len(s.liveKV)+len(t.buf) >= cacheLimit {
		s.liveKV = map[string]liveEntry{}
	}
	live, deps := s.prefix+famLive, s.prefix+famDeps
	for k, o := range t.buf {
		var kv *mvccpb.KeyValue
		if !o.del {
			kv = &mvccpb.KeyValue{Key: []byte(k), Value: []byte(o.val), ModRevision: rev, Lease: int64(o.lease)}
		}
		switch {
		case strings.HasPrefix(k, live):
			// Not with the others: see above.
			s.liveKV[k] = liveEntry{kv, o.until}
			continue
		case strings.HasPrefix(k, deps) && s.depsKV != nil:
			if kv == nil {
				delete(s.depsKV, k)
			} else {
				s.depsKV[k] = kv
			}
		}
		s.cacheKV[k] = kv
	}
	s.cacheRev = rev
}

// readyWindow is how many ready keys a transaction's begin reads: the
// first ready page. A writer whose cache is warm (it committed the head
// last: one long-lived process that commits group after group) reads 64,
// and its claims read ahead the records of all of them, into the cache:
// the groups after find their candidates there and need no request of
// their own to read them, until the window is used up. A cold handle
// (a CLI process, or one that other hosts keep writing past) reads 16:
// records read ahead for a later group would be stale by then.
func (s *Store) readyWindow(write bool) int64 {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if write && s.warm {
		return warmReadyPage
	}
	return firstReadyPage
}

// dropCache forgets everything cached.
func (s *Store) dropCache() {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	s.resetCacheLocked(0)
	s.prepared.Store(nil)
}
