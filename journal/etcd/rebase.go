package etcd

import (
	"maps"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Losing a race on the head key alone. Every commit rewrites the head
// (the log's next sequence number, the token counter, the counts), so two
// writers that touch different tasks still conflict there. Running the
// loser again from a fresh snapshot cost two or three round trips and a
// backoff sleep, for a conflict on one key whose new value etcd could
// have sent back: at 16 clients that made 16 runs per claim.
//
// So a failed commit brings the meta keys back in the same answer (its
// Else), and the loser runs its function again at once on the state it
// read before, with the new head: no snapshot to read again, no sleep;
// only the commit is a request. That is sound for the same reason every
// commit is: each key the run read is compared at commit with the
// revision it was read at, the head with its new one. If something else
// it read had changed too, that commit fails as well, with the head where
// it was: then the run is made again on a fresh snapshot. (Asking etcd in
// the Else whether the other compares held, to skip that one wasted
// commit, cost every commit 1.7× its time, lost race or not: the request
// carried all its compares twice.)

// headMoved is the conflict of a commit that failed with the head moved:
// the meta keys as etcd holds them now.
type headMoved struct {
	meta    map[string]string
	headRev int64
	verRev  int64
	floor   string // the trusted floor (floor.go)
}

func (*headMoved) Error() string { return "etcd: another writer moved the head; run again on it" }

// headMovedFrom reads the meta keys from the Else of a failed commit
// (nil if they are not there).
func headMovedFrom(resp *clientv3.TxnResponse, metaKey string) *headMoved {
	if len(resp.Responses) == 0 {
		return nil
	}
	m := parseMeta(resp.Responses[0].GetResponseRange().GetKvs(), metaKey)
	if m.headRev == 0 {
		return nil
	}
	return &headMoved{meta: m.values, headRev: m.headRev, verRev: m.verRev, floor: m.floor}
}

// rebased is a fresh run of the transaction on the snapshot t read, but
// with the meta keys of m: every key t read is known without a request,
// writes and the reads' record start empty, and the head is compared at
// its new revision.
func (t *Tx) rebased(m *headMoved) (*Tx, error) {
	n := t.s.newTx(t.ctx, true)
	n.turn = t.turn
	n.rev, n.firstPage = t.rev, t.firstPage
	n.pages = maps.Clone(t.pages)
	n.fetched = make(map[string]*mvccpb.KeyValue, len(t.fetched)+len(t.got))
	maps.Copy(n.fetched, t.fetched)
	maps.Copy(n.fetched, t.got)
	n.liveScan = t.liveScan
	n.meta, n.verRev = m.meta, m.verRev
	n.reads[t.key(famMeta, metaHead)] = m.headRev
	n.spread = t.spread
	n.floor, n.rebasedOn = t.floor, &m.floor
	n.swept, n.sweepAll = t.swept, t.sweepAll
	n.fresh, n.unverified = t.fresh, t.unverified
	if n.err = t.s.b.checkMeta(m.meta); n.err != nil {
		return nil, n.err
	}
	h, err := decodeHead(m.meta[metaHead])
	if err != nil {
		return nil, err
	}
	n.head = h
	return n, nil
}
