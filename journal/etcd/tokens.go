package etcd

import (
	"errors"
	"time"

	"github.com/fencectl/fencectl/journal"
)

// NextToken issues a fencing token: max(counter+1, now in µs), below the
// durable token ceiling (journal/ceiling.go), which lives in the tree's
// .fence on the filesystem the hosts share.
func (t *Tx) NextToken(now time.Time) (uint64, error) {
	t.wrote()
	if err := t.begin(); err != nil {
		return 0, err
	}
	next := t.head.Token + 1
	if clock := uint64(now.UnixMicro()); clock > next {
		next = clock
	}
	next, err := t.reserve(next)
	if err != nil {
		return 0, err
	}
	t.head.Token, t.headMod = next, true
	if t.issued == nil {
		t.issued = map[uint64]bool{}
	}
	t.issued[next] = true
	return next, nil
}

// reserve returns next, or a token above it, kept below a ceiling the
// files record. The first token of a handle (and a long-lived handle's
// first after journal.WitnessRefresh, or after the counter went back
// under it) compares the files with the journal: a journal behind the
// files' witness (restored from a snapshot) starts above the ceiling,
// above every token issued since (witness.go). A cluster that lost the
// journal whole is recover's (tokenFloor).
func (t *Tx) reserve(next uint64) (uint64, error) {
	// A jump an earlier run of this Update decided (its commit then lost
	// a race) stands: the journal read now is as far behind as before.
	next = max(next, t.s.tokenFloor.Load())
	now := t.Now() // the journal's clock: the tests' settable one
	fresh := t.s.ceilingChecked.Load() && !(journal.Witness{Token: 1, At: time.Unix(0, t.s.witnessAt.Load())}).Stale(now)
	if next <= t.head.Ceiling && fresh {
		return next, nil
	}
	if t.s.dir == "" {
		return 0, errors.New("issue a token: the store does not know its tree's .fence directory")
	}
	onFile, seen, ok, _ := journal.ReadCeilingWitness(t.s.dir)
	behind, err := t.behindWitness(seen)
	if err != nil {
		return 0, err
	}
	t.s.ceilingChecked.Store(true)
	t.s.witnessAt.Store(now.UnixNano()) // no files, or a witness due: not again at once
	if ok && !seen.Stale(now) {
		t.s.witnessAt.Store(seen.At.UnixNano())
	} else if ok {
		t.s.witnessDue.Store(true)
	}
	if next <= t.head.Ceiling && (!ok || onFile <= t.head.Ceiling) && !behind {
		return next, nil
	}
	// Files above the journal, and the journal not behind its witness: a
	// raise whose commit lost a race (this host's or another's), or is
	// still on its way. Hosts do not take turns, so a raise in the files
	// alone is no sign of a lost journal (the witness is: a raise that
	// committed is witnessed after its commit): take the files' ceiling
	// as the journal's rather than jump above it.
	if ok && !behind && onFile > t.head.Ceiling && next <= onFile {
		t.head.Ceiling, t.headMod = onFile, true
		return next, nil
	}
	if behind {
		next = max(next, t.s.b.seenCounter.Load()+1, seen.Token+1)
	}
	if ok && behind && onFile >= next {
		next = onFile + 1
	}
	if behind {
		t.s.tokenFloor.Store(max(t.s.tokenFloor.Load(), next))
	}
	raised := next + journal.CeilingStep
	if err := journal.RaiseCeiling(t.s.dir, raised); err != nil {
		return 0, err
	}
	t.s.witnessDue.Store(true)
	t.head.Ceiling, t.headMod = raised, true
	return next, nil
}

// LastToken returns the highest token ever issued (or the seed).
func (t *Tx) LastToken() uint64 {
	if t.begin() != nil {
		return 0
	}
	return t.head.Token
}

// Ceiling returns the journal's copy of the token ceiling.
func (t *Tx) Ceiling() uint64 {
	if t.begin() != nil {
		return 0
	}
	return t.head.Ceiling
}

// RaiseCounter sets the token counter to at least v, with the ceiling
// above it: replay's repair of a counter found below a token the log
// issued.
func (t *Tx) RaiseCounter(v uint64) error {
	if err := t.begin(); err != nil {
		return err
	}
	if t.head.Token >= v {
		return nil
	}
	t.wrote()
	v, err := t.reserve(v)
	if err != nil {
		return err
	}
	t.head.Token, t.headMod = v, true
	return nil
}
