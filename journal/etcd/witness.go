package etcd

import (
	"github.com/fencectl/fencectl/journal"
)

// The ceiling's witness on etcd (journal/witness.go): a token this
// journal issued, recorded in the ceiling's files. Hosts do not take
// turns here, so a claim records its token after its commit, never
// before: a token in the files is always one the live journal holds, and
// a snapshot whose counter is below it is either older than the commit
// that recorded it (read again: reserve asks for a fresh snapshot once)
// or a restored copy that lost tokens it issued.

// noteCounter records the token counter of a snapshot this handle read: a
// snapshot whose counter is below one the backend saw before (etcd
// restored while the process ran) makes the next token read the
// ceiling's files.
func (s *Store) noteCounter(counter uint64) {
	if counter < s.b.seenCounter.Load() {
		s.ceilingChecked.Store(false)
		return
	}
	s.b.seen(counter)
}

// seen raises seenCounter to counter.
func (b *Backend) seen(counter uint64) {
	for {
		old := b.seenCounter.Load()
		if counter <= old || b.seenCounter.CompareAndSwap(old, counter) {
			return
		}
	}
}

// behindWitness reports whether this snapshot stands behind the witness
// seen in the files, or behind a counter this handle saw: the journal
// lost tokens it issued. A first sighting of a witness ahead of the
// snapshot spoils the run (errConflict): the snapshot may predate the
// commit that recorded the witness, and the run again reads a snapshot
// taken after the files were.
func (t *Tx) behindWitness(seen journal.Witness) (bool, error) {
	if t.head.Token < t.s.b.seenCounter.Load() {
		return true, nil
	}
	if !seen.Behind(t.head.Token) {
		t.s.recheck.Store(0)
		return false, nil
	}
	if t.s.recheck.Swap(seen.Token) != seen.Token {
		t.s.ceilingChecked.Store(false)
		return false, t.fail(errConflict)
	}
	// The same witness again, on a snapshot read after the files: it is
	// the journal that is behind. Known from now on, for every handle.
	t.s.recheck.Store(0)
	t.s.b.seen(seen.Token)
	return true, nil
}

// afterCommit runs after a commit went through: the counter it wrote is
// seen, and a witness due is recorded (best effort: a witness left old
// only widens the window in which a restored journal goes unnoticed).
func (t *Tx) afterCommit() {
	if len(t.issued) == 0 {
		return
	}
	t.s.noteCounter(t.head.Token)
	if t.s.witnessDue.Swap(false) {
		w := journal.Witness{Token: t.head.Token, At: t.Now()}
		if journal.RaiseCeilingWitnessed(t.s.dir, 0, w) == nil {
			t.s.witnessAt.Store(w.At.UnixNano())
		}
	}
}

// LostTokens reports whether this snapshot of the journal is behind the
// tokens it issued: behind the witness of the ceiling's files, or behind
// a counter this process saw (the cluster restored from a snapshot while
// it ran). The files are read again only when they changed
// (journal.CeilingCache). Like reserve, a first sighting of a witness
// ahead spoils the run, which reads a snapshot taken after the files.
func (t *Tx) LostTokens() (bool, error) {
	if err := t.begin(); err != nil {
		return false, err
	}
	var seen journal.Witness
	if t.s.dir != "" {
		_, seen, _, _ = t.s.ceilings.Read(t.s.dir)
	}
	return t.behindWitness(seen)
}
