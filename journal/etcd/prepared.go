package etcd

import (
	"context"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Beginning a write transaction on the snapshot Head read.
//
// A process that serves many agents commits group after group, and after
// each fence asks Head whether anyone else committed since (reconcile),
// then begins the next group's transaction: two linearizable reads in a
// row, one round trip each, with nothing of this handle's in between. So
// a handle that commits group after group reads, in Head, the snapshot
// begin would read (readSnapshot), and its next write transaction begins
// on it: no round trip of its own. With the liveness keys it wrote and
// the dependents index kept in its cache (cache.go), a group of claims
// and completes of this handle's own tasks then reads nothing before its
// commit.
//
// The snapshot was read before the group's operations were all asked
// for, and the cached liveness keys may be gone (etcd deletes a key when
// its lease runs out, without moving the head), so such a run is
// unverified, and only a commit makes its outcome stand:
//
//   - a commit compares the head and every key the run read, as any
//     commit does: one that holds says that nothing the run read has
//     changed since, up to the commit, which comes after every operation
//     of the group was asked for;
//   - a run that commits nothing (every operation refused, or failed) is
//     made again at once on reads of its own (Store.UpdateReading).
//
// Only Head's snapshot that finds the head this handle's own last commit
// is kept (nobody else wrote since), for at most preparedMaxAge, and for
// one transaction.

// preparedMaxAge bounds how old a prepared snapshot a transaction begins
// on: older, it is likely enough to be overtaken that reading afresh is
// the cheaper way.
const preparedMaxAge = 50 * time.Millisecond

// preparedSnapshot is a snapshot Head read for the next write
// transaction: the ready page it read is readyPage keys from readyFrom.
type preparedSnapshot struct {
	snap      *snapshot
	readyPage int64
	readyFrom string
	at        time.Time
}

// preparing reports whether Head reads a snapshot for the next write
// transaction: a writable handle that has committed more than once and
// whose cache is warm (nobody else wrote since its last commit). A
// process that makes one commit (a CLI command) keeps Head's one-key
// read.
func (s *Store) preparing() bool {
	if s.readOnly || s.commits.Load() < 2 {
		return false
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.warm
}

// headPreparing is Head that reads a whole snapshot, with the dependents
// index if the cache does not hold it yet (and it was not found too large
// to), and keeps it for the next write transaction if the head is still
// this handle's last commit.
func (s *Store) headPreparing(ctx context.Context) (string, error) {
	page, from := s.readyWindow(true), s.readyHint()
	var extra []clientv3.Op
	wantDeps := !s.depsKnown() && !s.depsLarge.Load()
	if wantDeps {
		p := s.prefix + famDeps
		extra = append(extra, clientv3.OpGet(p, clientv3.WithRange(rangeEnd(p)), clientv3.WithLimit(pageSize)))
	}
	at := time.Now()
	snap, err := s.b.readSnapshot(ctx, extra, page, from)
	if err != nil {
		return "", s.b.unreachable(err)
	}
	if snap.headRev == 0 {
		return "", nil
	}
	if snap.headRev == s.committed.Load() {
		if wantDeps && len(snap.extra) == 1 {
			if r := snap.extra[0].GetResponseRange(); r.More {
				s.depsLarge.Store(true)
			} else {
				s.keepDeps(snap.headRev, r.Kvs)
			}
		}
		snap.extra = nil
		s.prepared.Store(&preparedSnapshot{snap: snap, readyPage: page, readyFrom: from, at: at})
	}
	return "etcd:" + strconv.FormatInt(snap.headRev, 10), nil
}

// takePrepared returns the prepared snapshot, once, if it is still of
// this handle's last commit and young enough.
func (s *Store) takePrepared() *preparedSnapshot {
	p := s.prepared.Swap(nil)
	if p == nil || p.snap.headRev != s.committed.Load() || time.Since(p.at) > preparedMaxAge {
		return nil
	}
	return p
}
