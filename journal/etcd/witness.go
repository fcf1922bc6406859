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

// behindWitness reports whether the journal stands behind the witness
// seen in the files, or behind a counter this process saw: it lost tokens
// it issued. A snapshot found behind is not judged by itself (see
// LostTokens): the head is read again from the cluster, after the files
// were; one found ahead spoils the run (errConflict), which reads a newer
// snapshot. Only a head still behind is a lost journal, known from then
// on for every handle of the process.
func (t *Tx) behindWitness(seen journal.Witness) (bool, error) {
	floor := max(seen.Token, t.s.b.seenCounter.Load())
	if t.head.Token >= floor {
		return false, nil
	}
	r, err := t.s.b.cli.Get(t.ctx, t.key(famMeta, metaHead))
	if err != nil {
		return false, t.fail(t.s.b.unreachable(err))
	}
	now := t.head.Token // absent: as behind as this snapshot
	if len(r.Kvs) == 1 {
		if h, err := decodeHead(string(r.Kvs[0].Value)); err == nil {
			now = h.Token
		}
	}
	if now >= floor {
		t.s.ceilingChecked.Store(false)
		return false, t.fail(errConflict)
	}
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

// LostTokens reports whether the journal is behind the tokens it issued:
// behind the witness of the ceiling's files, or behind a counter this
// process saw (the cluster restored from a snapshot while it ran). The
// files are read again only when they changed (journal.CeilingCache).
//
// A snapshot can be older than what the files or this process saw
// without any restore: a cached or prepared snapshot, a commit of another
// handle or host in between. Taken for a restore, that ended every live
// lease of a busy tree (found from outside, under contention). So a
// snapshot found behind is never judged by itself, nor by a first
// sighting another transaction recorded: the head is read again from the
// cluster, after the files were, and only a head still behind is a lost
// journal. One found ahead spoils this run, which reads a newer snapshot.
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
