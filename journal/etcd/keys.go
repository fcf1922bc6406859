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
	keyLock    = "/lock"
	keyWriters = "/w" // the writers' queue (store.go)

	metaVersion  = "version"
	metaTreeID   = "tree_id"
	metaDefaults = "defaults"
	metaHead     = "head"
	metaBlocked  = "blocked" // how many available tasks wait for others (absent: 0)
)

// SchemaVersion is the etcd journal's newest layout version: etcd-2 adds
// V2 records (dependencies, labels, a not-before time; journal.IsV2) and
// their indexes. A new journal is baseVersion and stays so while no task
// uses them, so the previous fencectl can still use it; the commit that
// writes the first V2 record also writes the version (and compares the
// version key as begin read it), so an older fencectl's next transaction
// refuses the journal with a VersionError.
const SchemaVersion = "etcd-2"

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

func stateIndex(s record.State) int {
	for i, x := range record.States {
		if x == s {
			return i
		}
	}
	return -1
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
