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
// opens fine, with the token counter of the day of the backup. Tokens
// issued since are above that counter, and the next claims can issue them
// again, to other claims: when tokens follow the counter (for a while
// after a recover, or after a claim by a host whose clock ran ahead), or
// when the clock they followed was ahead and is right again.
//
// So the files also record a witness: a token the journal has issued.
// Only claims move the token counter, and each process's first claim
// reads the files, so a journal whose counter is below the witness has
// lost tokens it issued (a restored copy) whatever else was written to it
// since; its next token then starts above the ceiling's files, as after
// a lost journal.
//
// Writing the files at every claim would cost a synced write each, so
// the witness is refreshed by the first claim once it is WitnessRefresh
// old: a restore loses sight only of the tokens issued within that long
// after the last refresh before its backup.

// WitnessRefresh is how old a witness may grow while claims go on: a
// refresh costs the ceiling's two small synced writes.
const WitnessRefresh = 10 * time.Second

// Witness is a token the journal is known to have issued, and when the
// ceiling's files recorded it. The zero Witness is none (files written
// before witnesses).
type Witness struct {
	Token uint64
	At    time.Time // by the writer's clock
}

// IsZero reports whether w is no witness.
func (w Witness) IsZero() bool { return w.Token == 0 }

// Behind reports whether a journal whose token counter stands at counter
// has not issued w's token: it lost tokens it issued.
func (w Witness) Behind(counter uint64) bool { return counter < w.Token }

// Stale reports whether w should be written again by a writer whose
// clock says now.
func (w Witness) Stale(now time.Time) bool {
	return w.IsZero() || now.Sub(w.At) >= WitnessRefresh || now.Before(w.At.Add(-WitnessRefresh))
}

// newer returns the later of w and o: the higher token, and the newer
// time for the same token.
func (w Witness) newer(o Witness) Witness {
	if o.Token > w.Token || (o.Token == w.Token && o.At.After(w.At)) {
		return o
	}
	return w
}

// witnessWord opens a witness line.
const witnessWord = "witness-token"

// line renders w as the witness line of a ceiling file ("" for none).
func (w Witness) line() string {
	if w.IsZero() {
		return ""
	}
	return fmt.Sprintf("%s %d %d\n", witnessWord, w.Token, w.At.Unix())
}

// parseWitness reads a witness line; ok is false for any other line
// (a later version's lines are left for it to read).
func parseWitness(line string) (w Witness, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != witnessWord {
		return w, false
	}
	tok, err1 := strconv.ParseUint(f[1], 10, 64)
	at, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || tok > maxCeiling {
		return w, false
	}
	return Witness{Token: tok, At: time.Unix(at, 0).UTC()}, true
}
