package bolt

import (
	"encoding/binary"
	"time"
)

var (
	bucketMeta   = []byte("meta")
	bucketTasks  = []byte("tasks")
	bucketReady  = []byte("ready")
	bucketExpiry = []byte("expiry")
	bucketClaims = []byte("claims")
	bucketEvents = []byte("events")
	bucketByTask = []byte("task_events")
	// bucketRequests maps (agent, request id) to the token of the claim
	// granted to that request while it is current. Made on first use.
	bucketRequests = []byte("requests")
	// bucketDependents is the reverse index of dependencies: key
	// dependency, 0, dependent (ids never hold a 0 byte) for every id in a
	// task's After, so that a completion finds the tasks waiting for it
	// without a scan. bucketLabels is the per-label ready index: label, 0,
	// then the ready key, value the id. Both are made on first use
	// (schema 4).
	bucketDependents = []byte("dependents")
	bucketLabels     = []byte("label_ready")
	// bucketDue is the due index: the waiting tasks that wait for a time
	// only (record.Task.Scheduled), key expiryKey(NotBefore, Seq), value
	// the id. Made on first use (schema 5).
	bucketDue  = []byte("due")
	allBuckets = [][]byte{bucketMeta, bucketTasks, bucketReady, bucketExpiry, bucketClaims, bucketEvents, bucketByTask}
)

const (
	keyVersion    = "version"
	keyTreeID     = "tree_id"
	keyDefaults   = "defaults"
	keyToken      = "token"
	keyLastCommit = "last_commit" // first and last event seq of the last write transaction
	keyCountPfx   = "count:"
	keyBlocked    = "count-blocked" // available tasks that wait for others
)

// pairKey is a, a 0 byte, b: the key of one entry of the dependents index.
func pairKey(a, b string) []byte {
	return append(append(append(make([]byte, 0, len(a)+len(b)+1), a...), 0), b...)
}

// labelKey is one entry of the per-label ready index: label, 0, then the
// ready key (claim order within the label).
func labelKey(label string, priority int64, seq uint64) []byte {
	return append(append(append(make([]byte, 0, len(label)+17), label...), 0), readyKey(priority, seq)...)
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func getU64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// readyKey orders available tasks: highest priority first, then oldest.
// Flipping the sign bit maps int64 onto uint64 in order; inverting all bits
// makes the order descending.
func readyKey(priority int64, seq uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, ^(uint64(priority) ^ (1 << 63)))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

// expiryKey orders leases by deadline, then token (unique): seconds
// (sign bit flipped), nanoseconds, token. Seconds rather than UnixNano so
// that no deadline overflows the key.
func expiryKey(deadline time.Time, token uint64) []byte {
	k := make([]byte, 20)
	binary.BigEndian.PutUint64(k, uint64(deadline.Unix())^(1<<63))
	binary.BigEndian.PutUint32(k[8:], uint32(deadline.Nanosecond()))
	binary.BigEndian.PutUint64(k[12:], token)
	return k
}

// keyTime reads the time back from an expiryKey (the due index's keys).
func keyTime(k []byte) time.Time {
	if len(k) < 12 {
		return time.Time{}
	}
	return time.Unix(int64(binary.BigEndian.Uint64(k)^(1<<63)), int64(binary.BigEndian.Uint32(k[8:]))).UTC()
}

// byTaskKey indexes an event under its task: id, a 0 byte (ids never hold
// one), then the big-endian seq, so one task's events are one key range.
func byTaskKey(id string, seq uint64) []byte {
	k := make([]byte, 0, len(id)+9)
	k = append(k, id...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// requestKey scopes a request id by agent name: agent, a 0 byte, request id.
func requestKey(agent, request string) []byte {
	return append(append(append([]byte{}, agent...), 0), request...)
}
