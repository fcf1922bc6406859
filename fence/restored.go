package fence

import (
	"context"
	"fmt"

	"github.com/fencectl/fencectl/journal"
)

// AfterRestore is for a tree put back from a backup whole: the journal
// and the token ceiling's files together (a tar of the tree, a volume
// snapshot; on etcd, a snapshot restored with a copy of .fence and
// .fence-tokens). Nothing left on disk then knows the tokens issued after
// the backup, and agents may hold them: the witness (journal/witness.go)
// came back with the journal it would have caught. AfterRestore moves the
// token counter above the restored ceiling and above the clock plus a
// ceiling step (journal.CeilingStep, about 71 minutes of tokens), which
// is above every token issued since by a host whose clock was not ahead
// of this one's: a ceiling that lost history raised stood at most a step
// above the token that raised it, and that token at most at its clock.
// It returns the token counter from which the next token counts up.
func (t *Tree) AfterRestore(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	db, err := t.open(false)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	// A garbled copy still leaves the journal's ceiling and the clock.
	onFile, _, _, _ := journal.ReadCeilingWitness(t.metaDir)
	var counter uint64
	err = db.Update(func(tx journal.Tx) error {
		floor := max(onFile, tx.Ceiling(), uint64(tx.Now().UnixMicro())+journal.CeilingStep)
		if err := tx.RaiseCounter(floor); err != nil {
			return err
		}
		counter = tx.LastToken()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("raise the token counter after a restore: %w", err)
	}
	return counter, nil
}
