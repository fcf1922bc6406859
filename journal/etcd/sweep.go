package etcd

// Sweeping the expiry index now and then, not in every transaction.
//
// A claim reaps expired leases first, and on etcd finding them means
// reading every claimed task's expiry entry and liveness key: the expiry
// and liveness families from their start. Completed claims leave their
// keys there as tombstones until the cluster is compacted, and a range
// read walks them all, so every transaction paid for every task finished
// since the last compaction.
//
// A lease that etcd expired needs finding once, not by every
// transaction: a commit that swept puts P/m/sweep under a lease of
// sweepTTL, and while that key lives, begin reads no expiry pages and
// Expired answers that nothing expired. So a lease is reaped by the first
// claim at most about sweepTTL (by etcd's clock) after etcd expired it,
// well inside the slack of etcd's own lease expiry (leases.go). Fencing
// does not wait for the sweep: a task whose liveness key is gone is
// judged expired when it is read (judge), and its holder refused.
//
// `fencectl reap` sweeps whatever the marker says (SweepAll).

// sweepTTL is the marker's TTL in seconds (pooledLease adds its window).
const sweepTTL = 1

// SweepAll makes Expired read every lease in this transaction, recent
// sweep or not (journal.FullSweeper).
func (t *Tx) SweepAll() { t.sweepAll = true }

// markSweep adds the marker to a commit that swept: it is skipped if no
// lease can be had (the next transaction sweeps again).
func (t *Tx) markSweep() {
	if !t.sweeping {
		return
	}
	id, _, err := t.s.b.pooledLease(t.ctx, sweepTTL)
	if err != nil {
		return
	}
	t.buf[t.key(famMeta, metaSweep)] = &op{val: "", lease: id}
}
