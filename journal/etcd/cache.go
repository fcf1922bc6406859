package etcd

import (
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The handle's cache of point keys (task records, liveness keys, claims,
// requests).
//
// Every write transaction rewrites the head key, so while the head's mod
// revision is still that of this handle's last commit, nobody else has
// written, and what this handle last read or wrote of a key is what etcd
// holds: a transaction then reads it from memory. The one change that
// does not go through the head, etcd deleting a liveness key when its
// lease runs out, is why liveness keys are never cached (a View has no
// commit to catch a stale one). A failed commit drops the cache. So the
// cache saves round trips, never correctness: every key read is still
// checked at commit.

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
	s.cacheRev, s.cacheKV, s.warm = headRev, nil, false
	return headRev != 0
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
		s.cacheRev, s.cacheKV, s.warm = 0, nil, false
		return
	}
	s.warm = true
	if s.cacheKV == nil || len(s.cacheKV)+len(t.buf) >= cacheLimit {
		s.cacheKV = map[string]*mvccpb.KeyValue{}
	}
	live := s.prefix + famLive
	for k, o := range t.buf {
		if len(k) >= len(live) && k[:len(live)] == live {
			continue // never cached: see liveKeys
		}
		if o.del {
			s.cacheKV[k] = nil
			continue
		}
		s.cacheKV[k] = &mvccpb.KeyValue{Key: []byte(k), Value: []byte(o.val), ModRevision: rev, Lease: int64(o.lease)}
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
	s.cacheRev, s.cacheKV, s.warm = 0, nil, false
}
