package etcd

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/fencectl/fencectl/journal/record"
)

// Key families under a tree's prefix (see the package doc).
const (
	famMeta    = "/m/"
	famTask    = "/t/"
	famReady   = "/r/"
	famExpiry  = "/x/"
	famLive    = "/l/"
	famClaim   = "/c/"
	famRequest = "/q/"
	famEvent   = "/e/"
	famByTask  = "/b/"
	famDeps    = "/d/" // dependency, 0, dependent: the reverse index of After (etcd-2)
	famLabel   = "/g/" // label, 0, ready key → id: the ready index per label (etcd-2)
	famDue     = "/n/" // dueKey(NotBefore, seq) → id: waiting tasks that wait for a time only (etcd-3)
	famUnblock = "/u/" // ID → "": a done task some of whose dependents still wait for it (unblock.go)
	keyLock    = "/lock"
	keyWriters = "/w" // the writers' queue (store.go)

	metaVersion  = "version"
	metaTreeID   = "tree_id"
	metaDefaults = "defaults"
	metaHead     = "head"
	metaBlocked  = "blocked" // how many available tasks wait for others (absent: 0)
	metaWaiting  = "waiting" // how many tasks are waiting (absent: 0); the head counts the four older states
	metaFloor    = "floor"   // the ready index's floor, written with the head (floor.go)
	metaSweep    = "sweep"   // present while a sweep of the expiry index is recent (sweep.go)
	metaDropped  = "dropped" // how many events of each kind compaction dropped (compact.go)
)

// The families of compaction (compact.go).
const (
	famFolded      = "/f/" // ID → the seq of the last event folded (8 bytes, big-endian), then the record
	famFoldedToken = "/k/" // TOKEN → ID: the task of a token whose claim compaction forgot
)

// families are every key family of a journal, in the order the package
// doc lists them: what recover sets aside and deletes. A family missing
// here would outlive its journal and mislead the next one (a stale
// label index would hand out tasks by labels they no longer have).
var families = []string{famMeta, famTask, famReady, famExpiry, famLive, famClaim, famRequest, famEvent, famByTask, famDeps, famLabel, famDue, famUnblock, famFolded, famFoldedToken}

// SchemaVersion is the etcd journal's newest layout version: etcd-2 adds
// V2 records (dependencies, labels, a not-before time; journal.IsV2) and
// their indexes. A new journal is baseVersion and stays so while no task
// uses them, so the previous fencectl can still use it; the commit that
// writes the first V2 record also writes the version (and compares the
// version key as begin read it), so an older fencectl's next transaction
// refuses the journal with a VersionError.
//
// etcd-3 adds the waiting state (tasks in waiting/, their count in
// P/m/waiting, the due index P/n/): an etcd-2 reader would find a state
// it has no directory for. The first V2 record written now marks the
// journal etcd-3 (an etcd-2 one too: fence moves its blocked tasks to
// waiting/ in that write).
const SchemaVersion = "etcd-3"

// readVersions are the older versions still read (and written, until the
// first V2 record raises them to SchemaVersion).
var readVersions = []string{baseVersion, "etcd-2"}

// baseVersion is the version a new journal starts at.
const baseVersion = "etcd-1"

func u64(v uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return string(b[:])
}

func getU64(s string) uint64 {
	if len(s) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64([]byte(s))
}

// readyKey orders available tasks as the bbolt store does: highest
// priority first, then oldest.
func readyKey(priority int64, seq uint64) string {
	return u64(^(uint64(priority) ^ (1 << 63))) + u64(seq)
}

// rangeEnd is the end of the range of keys that start with prefix.
func rangeEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// head is P/m/head: what every write transaction may move.
type head struct {
	Seq     uint64 // last event's sequence number
	Token   uint64 // highest token issued (or the seed)
	Ceiling uint64 // the journal's copy of the token ceiling
	First   uint64 // first and last event of the last commit that appended any
	Last    uint64
	Counts  [4]int64 // per state, in record.States order
}

const headSize = 8 * 9

func (h head) encode() string {
	b := make([]byte, 0, headSize)
	for _, v := range []uint64{h.Seq, h.Token, h.Ceiling, h.First, h.Last} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	for _, c := range h.Counts {
		b = binary.BigEndian.AppendUint64(b, uint64(c))
	}
	return string(b)
}

func decodeHead(s string) (head, error) {
	if len(s) != headSize {
		return head{}, errors.New("journal head has the wrong size")
	}
	v := func(i int) uint64 { return binary.BigEndian.Uint64([]byte(s[8*i : 8*i+8])) }
	h := head{Seq: v(0), Token: v(1), Ceiling: v(2), First: v(3), Last: v(4)}
	for i := range h.Counts {
		h.Counts[i] = int64(v(5 + i))
	}
	return h, nil
}

// headStates are the states the head counts, in its order: the four
// states of etcd-1 (waiting tasks are counted in P/m/waiting).
var headStates = [4]record.State{record.Available, record.Claimed, record.Done, record.Failed}

func stateIndex(s record.State) int {
	for i, x := range headStates {
		if x == s {
			return i
		}
	}
	return -1
}

// dueKey orders the due index: NotBefore (seconds, sign bit flipped, then
// nanoseconds), then the task's seq (unique).
func dueKey(at time.Time, seq uint64) string {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:], uint64(at.Unix())^(1<<63))
	binary.BigEndian.PutUint32(b[8:], uint32(at.Nanosecond()))
	return string(b[:]) + u64(seq)
}

// dueTime reads the time back from a dueKey.
func dueTime(k string) time.Time {
	if len(k) < 12 {
		return time.Time{}
	}
	b := []byte(k)
	return time.Unix(int64(binary.BigEndian.Uint64(b)^(1<<63)), int64(binary.BigEndian.Uint32(b[8:]))).UTC()
}

// expiryValue is P/x/ID's value: the recorded deadline and the token.
func expiryValue(deadline time.Time, token uint64) string {
	return u64(uint64(deadline.UnixNano())) + u64(token)
}

func decodeExpiry(s string) (deadline time.Time, token uint64) {
	if len(s) != 16 {
		return time.Time{}, 0
	}
	return time.Unix(0, int64(getU64(s[:8]))).UTC(), getU64(s[8:])
}
