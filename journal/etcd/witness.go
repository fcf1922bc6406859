package etcd

import (
	"time"

	"github.com/fencectl/fencectl/journal"
)

// The ceiling's witness on etcd (journal/witness.go): the revision and
// raft term of a transaction's first read. A snapshot restore brings the
// revision back to the snapshot's and the raft term back to 1 or 2 (a
// new raft log), so a read behind the witness the ceiling's files record
// means the journal is a restored copy, which may not know tokens issued
// after its snapshot was taken.

// witness is where this transaction's snapshot stands, written at now.
func (t *Tx) witness(now time.Time) journal.Witness {
	return journal.Witness{Store: "etcd", Revision: t.rev, Term: t.term, At: now}
}

// noteStanding records where a read of this handle was answered; a read
// behind an earlier one (etcd restored while the handle was open) makes
// the next token read the ceiling's files again, as a new handle's first
// does.
func (s *Store) noteStanding(rev int64, term uint64) {
	s.standMu.Lock()
	defer s.standMu.Unlock()
	if rev < s.standRev || term < s.standTerm {
		s.ceilingChecked.Store(false)
		s.standRev, s.standTerm = rev, term
		return
	}
	s.standRev, s.standTerm = max(s.standRev, rev), max(s.standTerm, term)
}
