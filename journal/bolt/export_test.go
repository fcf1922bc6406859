package bolt

import (
	bbolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// LockFlags returns the open flags of a held lock's descriptor.
func LockFlags(l *Lock) (int, error) { return unix.FcntlInt(l.f.Fd(), unix.F_GETFL, 0) }

// NextReady returns the id of the available task to claim next: highest
// priority, then oldest. ok is false when nothing is available.
func (t *Tx) NextReady() (id string, ok bool) {
	k, v := t.tx.Bucket(bucketReady).Cursor().First()
	if k == nil {
		return "", false
	}
	return string(v), true
}

// TreeID returns the journal's unique id, made at init.
func (t *Tx) TreeID() string {
	return string(t.tx.Bucket(bucketMeta).Get([]byte(keyTreeID)))
}

// NextSeq returns the seq the next appended event will get.
func (t *Tx) NextSeq() uint64 {
	return t.tx.Bucket(bucketEvents).Sequence() + 1
}

// Bolt exposes the underlying bbolt handle for consistency checks.
func (db *DB) Bolt() *bbolt.DB { return db.b }

// BaseVersion is the schema version a new journal starts at.
const BaseVersion = baseVersion

// FoldedVersion is the version a journal with folded records has.
const FoldedVersion = foldedVersion
