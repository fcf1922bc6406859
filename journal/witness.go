package journal

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The ceiling's witness.
//
// The token ceiling's files bound every token a lost journal can have
// issued, but a journal that comes back from a backup is not lost: it
// opens fine, with the counter and ceiling of the day of the backup. Its
// counter is behind the tokens issued since, and when the clock that
// tokens follow was ahead while they were issued (a host whose clock ran
// fast), the next claims can issue those tokens again, to other claims.
//
// So the files also record a witness: where the store stood when they
// were last written (etcd's revision and raft term; bbolt's event
// sequence). A store that stands behind its witness went back in time: etcd
// restored from a snapshot (its revision back to the snapshot's, its raft
// term back to 1 or 2), or a journal.db put back from a copy. Its next
// token then starts above the ceiling's files, as after a lost journal.
//
// A backup taken after the witness was written cannot be told apart from
// the live journal, so writers refresh the witness once it is older than
// WitnessRefresh: only the tokens issued within that long after a backup
// stay unknown to a restore of it (and are issued again only if the clock
// that issued them was ahead).

// WitnessRefresh is how old a witness may grow while the journal is in
// use: a refresh costs the ceiling's two small synced writes.
const WitnessRefresh = 10 * time.Second

// Witness is where a journal's store stood when the ceiling's files were
// written. The zero Witness is none (files written before witnesses, or
// by a store that keeps none).
type Witness struct {
	Store    string    // "etcd" or "bbolt": values of different stores do not compare
	Revision int64     // etcd's revision of a read; bbolt's event sequence
	Term     uint64    // etcd's raft term at that read; 0 for bbolt
	At       time.Time // when it was written, by the writer's clock
}

// IsZero reports whether w is no witness.
func (w Witness) IsZero() bool { return w.Store == "" }

// Behind reports whether now, a reading of the same store, stands
// before w: the store went back in time since w was written.
func (w Witness) Behind(now Witness) bool {
	if w.IsZero() || now.Store != w.Store {
		return false
	}
	return now.Revision < w.Revision || now.Term < w.Term
}

// Stale reports whether w should be written again by a writer whose
// clock says now.
func (w Witness) Stale(now time.Time) bool {
	return w.IsZero() || now.Sub(w.At) >= WitnessRefresh || now.Before(w.At.Add(-WitnessRefresh))
}

// newer returns the later of w and o as a refresh sees it: o when it is
// of the same store and further on (or w is none), else w.
func (w Witness) newer(o Witness) Witness {
	switch {
	case o.IsZero():
		return w
	case w.IsZero() || w.Store != o.Store:
		return o
	case o.Revision > w.Revision || (o.Revision == w.Revision && o.Term > w.Term):
		return o
	}
	return w
}

// line renders w as the witness line of a ceiling file ("" for none).
func (w Witness) line() string {
	if w.IsZero() {
		return ""
	}
	return fmt.Sprintf("witness %s %d %d %d\n", w.Store, w.Revision, w.Term, w.At.Unix())
}

// parseWitness reads a witness line; ok is false for any other line
// (a later version's lines are left for it to read).
func parseWitness(line string) (w Witness, ok bool) {
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "witness" || (f[1] != "etcd" && f[1] != "bbolt") {
		return w, false
	}
	rev, err1 := strconv.ParseInt(f[2], 10, 64)
	term, err2 := strconv.ParseUint(f[3], 10, 64)
	at, err3 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || rev < 0 {
		return w, false
	}
	return Witness{Store: f[1], Revision: rev, Term: term, At: time.Unix(at, 0).UTC()}, true
}
