package bolt

import (
	"errors"

	"github.com/fencectl/fencectl/journal"
)

// keyCeiling is the meta key of the journal's copy of the token ceiling
// (the ceiling files themselves are shared by every backend: journal/ceiling.go).
const keyCeiling = "token_ceiling"

// reserve makes sure token next is below the durable ceiling before it is
// issued, raising the ceiling when next would pass it, and returns the
// token to issue: next, or more when a ceiling file records more than
// this journal knows (the journal was restored from an older copy, or the
// commit of an earlier raise was lost), since tokens up to that ceiling
// may have been issued.
//
// The files are read when a token would pass the journal's copy, by a
// handle's first token (a CLI command opens one handle), and whenever the
// newest witness the handle knows is journal.WitnessRefresh old: a
// journal.db put back from a backup has an old counter and an old copy of
// the ceiling, and only the files know that tokens above them went out
// since. Their witness (journal/witness.go) is a token issued: a
// journal.db whose counter is below it is such a copy, even when the
// backup was taken after the ceiling's last raise. The witness is written
// after the commit (DB.Update), still under the lock, so it never names a
// token a crash or a rollback took back, and no token this handle issues
// is more than WitnessRefresh younger than a witness in the files.
func (t *Tx) reserve(next uint64) (uint64, error) {
	meta := t.tx.Bucket(bucketMeta)
	ceiling := getU64(meta.Get([]byte(keyCeiling)))
	now := t.Now() // the journal's clock: the tests' settable one
	fresh := t.witnessAt != nil && !t.witnessAt.IsZero() && !(journal.Witness{Token: 1, At: *t.witnessAt}).Stale(now)
	if next <= ceiling && fresh {
		return next, nil
	}
	if t.dir == "" {
		return 0, errors.New("issue a token: the transaction does not know its journal's directory")
	}
	// An unreadable copy is rewritten below: this journal bounds every
	// token it issued, so only the copy's news (if any) is lost.
	onFile, seen, ok, _ := journal.ReadCeilingWitness(t.dir)
	wentBack := ok && seen.Behind(getU64(meta.Get([]byte(keyToken))))
	if t.witnessAt != nil {
		*t.witnessAt = now // no files, or a witness due below: not again at once
		if ok && !seen.Stale(now) {
			*t.witnessAt = seen.At
		}
	}
	if ok && seen.Stale(now) || wentBack {
		t.witness = &journal.Witness{Token: next, At: now}
	}
	if next <= ceiling && (!ok || onFile <= ceiling) && !wentBack {
		return next, nil // the files agree: tokens up to ceiling are ours to issue
	}
	if ok && (onFile > ceiling || wentBack) && onFile >= next {
		next = onFile + 1
	}
	t.wrote()
	raised := next + journal.CeilingStep
	if err := journal.RaiseCeiling(t.dir, raised); err != nil {
		return 0, err
	}
	t.witness = &journal.Witness{Token: next, At: now}
	return next, meta.Put([]byte(keyCeiling), u64(raised))
}

// LostTokens reports whether the journal's token counter is behind the
// witness of the ceiling's files: a journal.db put back from a backup (or
// any older copy), whose leases are those of the day of the copy. The
// files are read again only when they changed (journal.CeilingCache); a
// file that cannot be read is reserve's to report, at the next token.
func (t *Tx) LostTokens() (bool, error) {
	if t.ceilings == nil || t.dir == "" {
		return false, nil
	}
	_, seen, ok, _ := t.ceilings.Read(t.dir)
	return ok && seen.Behind(getU64(t.tx.Bucket(bucketMeta).Get([]byte(keyToken)))), nil
}

// Ceiling returns the journal's copy of the token ceiling (0 before the
// first claim of a journal made before ceilings existed).
func (t *Tx) Ceiling() uint64 {
	return getU64(t.tx.Bucket(bucketMeta).Get([]byte(keyCeiling)))
}

// RaiseCounter sets the token counter to at least v, with the ceiling
// above it: replay's repair of a counter found below a token the log
// issued.
func (t *Tx) RaiseCounter(v uint64) error {
	meta := t.tx.Bucket(bucketMeta)
	if getU64(meta.Get([]byte(keyToken))) >= v {
		return nil
	}
	t.wrote()
	v, err := t.reserve(v)
	if err != nil {
		return err
	}
	return meta.Put([]byte(keyToken), u64(v))
}
