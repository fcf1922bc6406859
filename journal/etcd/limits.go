package etcd

import (
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// etcd bounds every request: a transaction may hold at most
// --max-txn-ops compares, and as many operations in each branch (128 by
// default). Operators lower it, or raise it, on the server, and no
// client can read it, so the journal's requests that grow with the data
// (read-ahead, events, the dependents a completion releases, a backlog
// of reaps) are split when etcd refuses them, and fence learns how much
// one commit may carry. What cannot be split is one operation on one
// task: a claim is about ten writes.

// MinTxnOps is the least --max-txn-ops an etcd server must allow for
// every fencectl command to work: a claim (about ten writes, a few more
// when it marks a sweep or raises the schema version) with room to
// spare. Commands that name many tasks, labels or dependencies at once
// need more.
const MinTxnOps = 16

// tooManyOps reports etcd's refusal of a request holding more operations
// than its --max-txn-ops.
func tooManyOps(err error) bool { return errors.Is(err, rpctypes.ErrTooManyOps) }
