// Package etcd is the journal store that keeps a tree's journal in etcd,
// so that agents on several hosts can share one tree (its files on a
// filesystem the hosts share). It implements the storage port of package
// journal; package fence uses it through that port only.
//
// # Keys
//
// Every key lives under the tree's prefix P (from `init --journal
// etcd://HOST:PORT/P`), so several trees share one cluster:
//
//	P/m/version, P/m/tree_id, P/m/defaults   written once, by Create
//	P/m/head     sequence, token counter, ceiling, counts, last commit
//	P/m/floor    the ready index's floor, written with the head (floor.go)
//	P/m/sweep    while it lives, expired leases were looked for lately (sweep.go)
//	P/m/dropped  how many events of each kind compaction dropped (compact.go)
//	P/t/ID       the task's record
//	P/r/KEY      ready index: priority (descending), then age → ID
//	P/x/ID       expiry index: the claimed tasks → deadline, token
//	P/l/ID       liveness: the claim's token, attached to an etcd lease
//	P/c/TOKEN    the claim behind every token
//	P/q/AGENT\0REQUEST   the token granted to a request id
//	P/e/SEQ      the event log;  P/b/ID\0SEQ  its per-task index
//	P/d/DEP\0ID  the dependents index;  P/g/LABEL\0KEY  ready per label;  P/n/KEY  due
//	P/u/ID       a done task whose dependents are still being released (unblock.go)
//	P/f/ID       a folded task's record;  P/k/TOKEN  the task of a claim compaction forgot
//	P/lock       the tree lock of init and recover (an etcd mutex)
//
// # Transactions
//
// A Tx reads one snapshot (the revision of its first read) and buffers its
// writes; at commit one etcd transaction checks that nothing it read has
// changed (a compare on the mod revision of every key read, and of every
// range scanned) and applies the writes. A failed compare means another
// client committed first: Update runs the function again on a fresh
// snapshot. Each retry follows someone else's commit, so contention slows
// claims but cannot stop them all (no livelock).
//
// P/m/head is the one key every write rewrites: the event sequence and the
// token counter must be dense and ordered across hosts. Two claims
// conflict on the ready index anyway; what the head adds is conflicts
// between writes to unrelated tasks, which fence's group commit folds into
// one transaction per process.
//
// What it costs where it hurts, 16 clients each committing alone on one
// member (Backend_Library/backend=etcd/clients=16): 72 to 95 claims/s,
// about 1 run again a claim, most of them at once on the new head
// (rebase.go), now that writers behind a queue of several join it rather
// than lose to it (queue.go; before, runs fell into 36 to 46 claims/s
// with 8 runs again a claim). The way without a hot key is etcd's own
// revision as the order: a token issued by etcd at commit, which the
// records and events of a claim could then only name implicitly (the
// revision of a key of its own), and readers that page the log by
// sequence (log, /api/events?after=) moved to revisions: a redesign of the
// journal, not made.
//
// A handle that commits group after group begins its next write on the
// snapshot fence's Head read after its last commit, with the liveness
// keys it wrote taken from its cache (prepared.go): such a run stands only
// if its commit holds, and one that commits nothing is run again on reads
// of its own.
//
// # Leases
//
// Leases expire by etcd's clock, not the hosts': a claim or heartbeat
// puts P/l/ID under an etcd lease that etcd keeps for at least the claim's
// TTL from then (leases.go: granted for TTL + 1 s, shared by the claims of
// one second); etcd deletes the key when it runs out. A claimed task whose P/l/ID is gone (or holds another
// token) is expired whatever its recorded deadline says, and one whose key
// is alive is not, so a host whose clock is off can neither expire nor
// extend anyone's lease. The deadline in the record is the claiming host's
// estimate, for people to read.
package etcd
