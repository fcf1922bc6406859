package fence

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// RecoverReport says what Recover did.
type RecoverReport struct {
	Root       string               `json:"root"`
	KeptAside  string               `json:"kept_aside,omitempty"` // where the damaged journal was moved
	Counts     map[record.State]int `json:"counts"`
	Freed      []string             `json:"freed"`       // tasks found in claimed/, now available
	FirstToken uint64               `json:"first_token"` // every new token is above this
	Findings   []Finding            `json:"findings"`    // entries left alone, copies quarantined
}

// JournalReadableError refuses to recover a journal that opens fine.
type JournalReadableError struct{ Path string }

func (e *JournalReadableError) Error() string {
	return fmt.Sprintf("the journal %s is readable: recover only rebuilds a lost or unreadable journal", e.Path)
}

// recoverOrder is which copy wins when a task's file is in several state
// directories: the most final state, so that nothing done is redone.
var recoverOrder = []record.State{record.Done, record.Failed, record.Claimed, record.Available, record.Waiting}

// Recover rebuilds the journal of the tree at root from its directories,
// when the journal is lost or unreadable. The damaged file is renamed
// aside, never deleted. Every task comes back in the state its directory
// says; tasks in claimed/ have no lease any more, so they come back
// available (their files move there). New tokens start above every token
// the tree can have issued (tokenFloor): above the token ceiling's files,
// above whatever the damaged journals still show, and above the clock. d
// gives the defaults when the old ones cannot be read.
//
// It refuses, changing nothing, a directory that is not a task tree (a
// mistyped --dir must not plant one), a readable journal (replay is the
// repair for that) and a journal of another schema version (a newer
// fencectl's journal is healthy, and rebuilding it would free every lease).
// Of o, only Backend, Timeout (the wait for the lock) and Clock apply.
func Recover(root string, d record.Defaults, o Options) (RecoverReport, error) {
	timeout, clock := o.lockTimeout(), o.clock()
	rep := RecoverReport{Counts: map[record.State]int{}, Freed: []string{}, Findings: []Finding{}}
	if err := checkDefaults(d); err != nil {
		return rep, err
	}
	if err := checkTaskTree(root); err != nil {
		return rep, err
	}
	m, err := fsmirror.Create(root) // the directories may be gone with the journal
	if err != nil {
		return rep, err
	}
	defer m.Close()
	m.Crash, m.Trace = crashAt, renameTrace
	rep.Root = m.Root()
	meta := filepath.Join(rep.Root, string(fsmirror.Meta))
	store, owned, err := o.backendFor(meta)
	if err != nil {
		return rep, err
	}
	if owned {
		defer closeBackend(store)
	}
	lock, err := store.LockTree(meta, timeout)
	if err != nil {
		return rep, err
	}
	defer lock.Release()

	if exists, err := store.Exists(meta); err != nil {
		return rep, err
	} else if exists {
		db, err := lock.Open(journal.OpenOptions{ReadOnly: true, Timeout: timeout, Clock: clock})
		if err == nil {
			err = db.Verify()
			db.Close()
			if err == nil {
				return rep, &JournalReadableError{Path: store.Path(meta)}
			}
		}
		var corrupt *journal.CorruptError
		if !errors.As(err, &corrupt) {
			return rep, err // a *VersionError among them: refused, untouched
		}
	}
	salvaged := lock.Salvage()
	if salvaged.DefaultsOK {
		d = salvaged.Defaults
	}
	seed, err := tokenFloor(meta, clock(), salvaged)
	if err != nil {
		return rep, err
	}
	if rep.KeptAside, err = lock.SetAside(clock()); err != nil {
		return rep, overlapInput(err)
	}
	if err := lock.Create(d, seed); err != nil {
		return rep, err
	}
	rep.FirstToken = seed
	crashAt("recover:after-create")

	// What the directories hold.
	sc, err := scanStateDirs(m, "left in place")
	if err != nil {
		return rep, err
	}
	rep.Findings = append(rep.Findings, sc.invalid...)
	ids := slices.Sorted(maps.Keys(sc.where))

	db, err := lock.Open(journal.OpenOptions{Timeout: timeout, Clock: clock})
	if err != nil {
		return rep, err
	}
	defer db.Close()
	var moves []move
	var extra []extraCopy
	stateDirs := map[record.State]fsmirror.Dir{}
	for _, s := range record.States {
		if stateDirs[s], err = DirOf(s); err != nil {
			return rep, err
		}
	}
	err = db.Update(func(tx journal.Tx) error {
		// Each run (a store may retry) starts afresh.
		moves, extra, rep.Freed, rep.Counts = nil, nil, []string{}, map[record.State]int{}
		now := tx.Now()
		for _, id := range ids {
			found := sc.where[id]
			keep := found[0]
			for _, s := range recoverOrder {
				if containsDir(found, stateDirs[s]) {
					keep = stateDirs[s]
					break
				}
			}
			to, _ := stateOfDir(keep)
			switch to {
			case record.Claimed:
				to = record.Available
				rep.Freed = append(rep.Freed, id)
			case record.Waiting:
				// What it waited for was in the lost journal: it is
				// available again (add it with --after to wait anew).
				to = record.Available
			}
			ev := adoptEvent(id, keep, to, d.MaxAttempts, now)
			ev.Reason = "recover"
			if _, _, err := commit(tx, nil, ev); err != nil {
				return err
			}
			rep.Counts[to]++
			moves = append(moves, move{id: id, from: keep, to: stateDirs[to]})
			for _, dir := range found {
				if dir != keep {
					extra = append(extra, extraCopy{id: id, dir: dir, keep: stateDirs[to]})
				}
			}
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("rebuild the journal: %w", err)
	}
	crashAt("recover:after-commit")
	t := &Tree{root: rep.Root, metaDir: meta, mirror: m, opts: Options{Timeout: timeout, Clock: clock}, batch: &batcher{}}
	b := m.NewBatch()
	for _, mv := range moves {
		if err := t.place(b, mv); err != nil {
			return rep, err
		}
	}
	if err := b.Sync(); err != nil {
		return rep, err
	}
	for _, x := range extra {
		// A second name of the same file (a move by link cut short) goes;
		// a real second copy is kept aside.
		if dropped, err := m.DropLink(x.dir, x.id, x.keep, x.id); err != nil {
			return rep, err
		} else if dropped {
			rep.Findings = append(rep.Findings, Finding{Kind: FindingStaleLink, Task: x.id, Dir: string(x.dir), Detail: "the same file as " + string(x.keep) + "/" + x.id + " under a second name, left by a move cut short; removed this name", Fixed: true})
			continue
		}
		name, err := m.Quarantine(x.dir, x.id)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, err
		}
		rep.Findings = append(rep.Findings, Finding{Kind: FindingDuplicate, Task: x.id, Dir: string(x.dir), Detail: "a second copy; moved to .fence/quarantine/" + name, Fixed: true})
	}
	return rep, nil
}

// tokenFloor is where a new journal of the tree whose journal directory
// is meta starts its token counter: above every token the tree can have
// issued, from everything that survives the loss of a journal. That is
// the token ceiling's files (.fence/tokens, and .fence-tokens in the root,
// which outlives `rm -rf .fence`), whatever the journal files in meta
// still show (salvaged: the journal and the copies earlier recovers set
// aside, however damaged), and the clock (now), for trees older than the
// ceiling. A ceiling file that exists but cannot be read is an error:
// starting without it could reissue old tokens.
func tokenFloor(meta string, now time.Time, salvaged journal.Salvaged) (uint64, error) {
	floor := uint64(now.UnixMicro())
	ceiling, found, err := journal.ReadCeiling(meta)
	if err != nil {
		return 0, err
	}
	if found && ceiling >= floor {
		floor = ceiling + 1
	}
	if salvaged.TokenOK && salvaged.Token >= floor {
		floor = salvaged.Token + 1
	}
	return floor, nil
}

// checkTaskTree refuses a directory that is not a task tree: one with
// neither .fence/ nor the token ceiling's root copy nor all four state
// directories. recover rebuilds a tree's journal; it must not plant a new
// tree wherever a mistyped --dir points.
func checkTaskTree(root string) error {
	isDir := func(name string) bool {
		fi, err := os.Lstat(filepath.Join(root, name))
		return err == nil && fi.IsDir()
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return invalidf(InputRoot, RuleNoTree, root, "no task tree at %s: nothing to recover", root)
	}
	if isDir(string(fsmirror.Meta)) {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(root, journal.RootCeilingName)); err == nil {
		return nil
	}
	for _, d := range fsmirror.StateDirs {
		if !isDir(string(d)) {
			return invalidf(InputRoot, RuleNotATree, root, "%s is not a task tree (it has no .fence/ and no %s/ directory): nothing to recover", root, d)
		}
	}
	return nil
}
