package etcd

import (
	"strings"

	"github.com/fencectl/fencectl/journal"
)

// Notes of dependents still to release (journal.Unblocker).
//
// A dependent costs a commit about five operations, and etcd takes 128
// in one transaction by default (fewer where an operator lowered
// --max-txn-ops): a task that twenty others wait for could not be
// completed at all when its commit had to release them all. fence
// releases a few in that commit (none, where even those are too many)
// and notes the task under P/u/ID; later commits release the rest and
// drop the note.
//
// The notes are looked for when expired leases are (sweep.go): a claim
// sweeps at most every sweepTTL, and a sweep reads P/u/ too. The scan is
// not checked at commit, for the reason Expired's is not: what a writer
// does with a note rests on reading the task and its dependents, which
// are checked.
//
// The family needs no new schema version: a fencectl that does not know
// it writes no note and reads none, so a note it misses only leaves some
// dependents waiting until a writer that knows it sweeps.

var _ journal.Unblocker = (*Tx)(nil)

// NoteUnblocking notes that dep is done with dependents left to release.
func (t *Tx) NoteUnblocking(dep string) error {
	t.wrote()
	t.put(t.key(famUnblock, dep), "")
	return nil
}

// DropUnblocking removes dep's note.
func (t *Tx) DropUnblocking(dep string) error {
	t.wrote()
	t.del(t.key(famUnblock, dep))
	return nil
}

// Unblocking calls fn with every noted task (this transaction's writes
// included): none while a sweep is recent, unless SweepAll, as Expired.
func (t *Tx) Unblocking(fn func(dep string) (more bool)) error {
	if err := t.begin(); err != nil {
		return err
	}
	if t.swept && !t.sweepAll {
		return nil
	}
	t.untracked = true
	defer func() { t.untracked = false }()
	return t.scanPrefix(famUnblock, func(id, _ string) (bool, error) { return fn(id), nil })
}

// NotedUnblocking reports whether this transaction wrote a note.
func (t *Tx) NotedUnblocking() bool {
	for k, o := range t.buf {
		if !o.del && strings.HasPrefix(k, t.key(famUnblock, "")) {
			return true
		}
	}
	return false
}
