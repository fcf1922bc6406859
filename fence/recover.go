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
	Root      string               `json:"root"`
	KeptAside string               `json:"kept_aside,omitempty"` // where the damaged journal was moved
	Counts    map[record.State]int `json:"counts"`
	Freed     []string             `json:"freed"` // tasks found in claimed/, now available
	// Released are the tasks found in waiting/, now available: what they
	// waited for (dependencies, a time, a backoff) was in the lost journal.
	Released   []string  `json:"released"`
	FirstToken uint64    `json:"first_token"` // every new token is above this
	Findings   []Finding `json:"findings"`    // entries left alone, copies quarantined
	// Unfinished says the journal set aside was the one an earlier
	// recover, cut short, was rebuilding (see recoveringName).
	Unfinished bool `json:"unfinished,omitempty"`
	// Defaults are the new journal's defaults, and DefaultsKept whether
	// they are the old journal's (salvaged) or the ones recover was given
	// (--ttl, --max-attempts: the old ones could not be read).
	Defaults     record.Defaults `json:"-"`
	DefaultsKept bool            `json:"-"`
}

// JournalReadableError refuses to recover a journal that opens fine.
type JournalReadableError struct{ Path string }

func (e *JournalReadableError) Error() string {
	return fmt.Sprintf("the journal %s is readable: recover only rebuilds a lost or unreadable journal", e.Path)
}

// RecoverCutShortError says a recover stopped after it began to replace
// the journal: the journal is not whole, and running recover again
// finishes the job (the mark in .fence says so; see recoveringName).
type RecoverCutShortError struct{ Err error }

func (e *RecoverCutShortError) Error() string {
	return fmt.Sprintf("recover stopped before it finished: %v; the tree is not recovered yet, and nothing is lost: once the cause is fixed, run recover again, which sets the unfinished journal aside and rebuilds it from the directories", e.Err)
}

func (e *RecoverCutShortError) Unwrap() error { return e.Err }

// recoveringName is the file in .fence that says a recover began to
// replace the journal and has not finished. It is written (and synced)
// before the old journal is set aside and removed once the new one holds
// every task and every file is in place. While it is there, the journal
// is one a recover was cut short in (a crash, or a refused write part way
// through a rebuild of many commits), so recover does not refuse it as
// readable: it sets it aside too (never deleted; its tokens still count)
// and rebuilds from the directories again. The files move only after the
// last commit, so the directories a second recover finds are those the
// first one found, and its report is the same. init removes the mark when
// it makes a journal of its own.
const recoveringName = "recovering"

// recoverChunk is how many tasks a commit of the rebuild first holds on
// a store whose transactions are bounded (etcd's --max-txn-ops); inChunks
// halves it until a commit fits.
const recoverChunk = sharedAdoptChunk

// recoverOrder is which copy wins when a task's file is in several state
// directories: the most final state, so that nothing done is redone.
var recoverOrder = []record.State{record.Done, record.Failed, record.Claimed, record.Available, record.Waiting}

// Recover rebuilds the journal of the tree at root from its directories,
// when the journal is lost or unreadable. The damaged file is renamed
// aside, never deleted. Every task comes back in the state its directory
// says; tasks in claimed/ have no lease any more, so they come back
// available (their files move there), and so do tasks in waiting/, whose
// reasons to wait were in the lost journal. New tokens start above every
// token the tree can have issued (tokenFloor): above the token ceiling's
// files, above whatever the damaged journals still show, and above the
// clock. d gives the defaults when the old ones cannot be read.
//
// The new journal is written in as many commits as the store takes. A
// recover cut short after it began to replace the journal leaves the mark
// recoveringName, and the next recover starts over (a *RecoverCutShortError
// says so).
//
// It refuses, changing nothing, a directory that is not a task tree (a
// mistyped --dir must not plant one), a readable journal (replay is the
// repair for that), a journal of another schema version (a newer
// fencectl's journal is healthy, and rebuilding it would free every lease)
// and a journal that belongs to another tree (an etcd prefix another
// tree's init took after this tree's journal was lost there).
// Of o, only Backend, Timeout (the wait for the lock) and Clock apply.
func Recover(root string, d record.Defaults, o Options) (RecoverReport, error) {
	timeout, clock := o.lockTimeout(), o.clock()
	rep := RecoverReport{Counts: map[record.State]int{}, Freed: []string{}, Released: []string{}, Findings: []Finding{}}
	if err := checkDefaults(d); err != nil {
		return rep, err
	}
	if err := checkTaskTree(root); err != nil {
		return rep, err
	}
	if abs, err := filepath.Abs(root); err == nil {
		if e := foreignOwner(filepath.Join(abs, string(fsmirror.Meta))); e != nil {
			return rep, e
		}
	}
	m, err := fsmirror.Create(root) // the directories may be gone with the journal
	if err != nil {
		return rep, err
	}
	defer m.Close()
	if err := m.SplitMount(); err != nil {
		return rep, err
	}
	m.Crash, m.Fault, m.Trace = crashAt, renameFault, renameTrace
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

	mark := filepath.Join(meta, recoveringName)
	_, err = os.Lstat(mark)
	rep.Unfinished = err == nil
	if exists, err := store.Exists(meta); err != nil {
		return rep, err
	} else if exists {
		db, err := lock.Open(journal.OpenOptions{ReadOnly: true, Timeout: timeout, Clock: clock})
		if err == nil {
			err = db.Verify()
			db.Close()
			if err == nil && !rep.Unfinished {
				return rep, &JournalReadableError{Path: store.Path(meta)}
			}
		}
		var corrupt *journal.CorruptError
		if err != nil && !errors.As(err, &corrupt) {
			if mismatch, ok := errors.AsType[*journal.TreeMismatchError](err); ok {
				return rep, fmt.Errorf("recover sets aside only this tree's own journal: %w", mismatch)
			}
			return rep, err // a *VersionError among them: refused, untouched
		}
	} else {
		rep.Unfinished = false // cut short before it made a journal: nothing to say
	}
	salvaged := lock.Salvage()
	if salvaged.DefaultsOK {
		d = salvaged.Defaults
	}
	rep.Defaults, rep.DefaultsKept = d, salvaged.DefaultsOK
	seed, err := tokenFloor(meta, clock(), salvaged)
	if err != nil {
		return rep, err
	}
	if rep.KeptAside, err = lock.SetAside(clock()); err != nil {
		return rep, overlapInput(err)
	}
	// A prefix that shares keys with another tree is refused before the
	// mark and the new tree id are written: a recover refused for it
	// changed .fence/, and putting the prefix back then left the tree
	// wedged (found from outside).
	if c, ok := lock.(journal.CreateChecker); ok {
		if err := c.CheckCreate(); err != nil {
			return rep, overlapInput(err)
		}
	}
	// From here on the journal is missing or not whole until the end.
	if err := writeSynced(mark, []byte("a recover began and has not finished: run fencectl recover\n")); err != nil {
		return rep, err
	}
	if err := rebuild(&rep, m, meta, lock, d, seed, o); err != nil {
		return rep, &RecoverCutShortError{Err: err}
	}
	if err := removeSynced(mark); err != nil {
		return rep, err
	}
	// Every lease the old journal held is gone with it: their holders
	// (a run still going, say) read theirs now.
	wakeAllHolders(meta)
	return rep, nil
}

// rebuild is Recover from the set-aside on: it makes a new journal under
// lock whose counter starts at seed, adopts every task file in as many
// commits as the store takes, then puts the files in place. Recover has
// marked the tree as recovering; an error here leaves the mark, for the
// next recover.
func rebuild(rep *RecoverReport, m *fsmirror.Mirror, meta string, lock journal.TreeLock, d record.Defaults, seed uint64, o Options) error {
	timeout, clock := o.lockTimeout(), o.clock()
	// The new journal's tree id goes in the config first, as init does:
	// a crash in between leaves a config that names no journal yet.
	if err := recordTreeID(meta, lock, o); err != nil {
		return err
	}
	if err := lock.Create(d, seed); err != nil {
		return err
	}
	rep.FirstToken = seed
	crashAt("recover:after-create")

	// What the directories hold.
	sc, err := scanStateDirs(m, "left in place")
	if err != nil {
		return err
	}
	rep.Findings = append(rep.Findings, sc.invalid...)
	ids := slices.Sorted(maps.Keys(sc.where))
	// The files become tasks of the new journal: their contents durable
	// first, whoever wrote them (see fsmirror.SyncContents).
	byDir := map[fsmirror.Dir][]string{}
	for _, id := range ids {
		for _, d := range sc.where[id] {
			byDir[d] = append(byDir[d], id)
		}
	}
	if err := syncContents(m, byDir); err != nil {
		return err
	}

	db, err := lock.Open(journal.OpenOptions{Timeout: timeout, Clock: clock})
	if err != nil {
		return err
	}
	defer db.Close()
	var moves []move
	var extra []extraCopy
	stateDirs := map[record.State]fsmirror.Dir{}
	for _, s := range record.States {
		if stateDirs[s], err = DirOf(s); err != nil {
			return err
		}
	}
	size := len(ids)
	if !db.Exclusive() {
		size = min(size, recoverChunk)
	}
	err = inChunks(len(ids), size, func(lo, hi int) error {
		var (
			cmoves          []move
			cextra          []extraCopy
			freed, released []string
			counts          map[record.State]int
		)
		err := db.Update(func(tx journal.Tx) error {
			// Each run (a store may retry) starts afresh.
			cmoves, cextra, freed, released, counts = nil, nil, nil, nil, map[record.State]int{}
			now := tx.Now()
			for _, id := range ids[lo:hi] {
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
					freed = append(freed, id)
				case record.Waiting:
					// What it waited for was in the lost journal: it is
					// available again (add it with --after to wait anew).
					to = record.Available
					released = append(released, id)
				}
				ev := adoptEvent(id, keep, to, d.MaxAttempts, now)
				ev.Reason = "recover"
				if _, _, err := commit(tx, nil, ev); err != nil {
					return err
				}
				counts[to]++
				cmoves = append(cmoves, move{id: id, from: keep, to: stateDirs[to]})
				for _, dir := range found {
					if dir != keep {
						cextra = append(cextra, extraCopy{id: id, dir: dir, keep: stateDirs[to]})
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		moves, extra = append(moves, cmoves...), append(extra, cextra...)
		rep.Freed, rep.Released = append(rep.Freed, freed...), append(rep.Released, released...)
		for s, n := range counts {
			rep.Counts[s] += n
		}
		crashAt("recover:after-chunk")
		return nil
	})
	if err != nil {
		return fmt.Errorf("rebuild the journal: %w", err)
	}
	crashAt("recover:after-commit")
	t := &Tree{root: rep.Root, metaDir: meta, mirror: m, opts: Options{Timeout: timeout, Clock: clock}, batch: &batcher{}}
	b := m.NewBatch()
	for _, mv := range moves {
		if err := t.place(b, mv); err != nil {
			return err
		}
	}
	if err := b.Sync(); err != nil {
		return err
	}
	for _, x := range extra {
		// A second name of the same file (a move by link cut short) goes;
		// a real second copy is kept aside.
		if dropped, err := m.DropLink(x.dir, x.id, x.keep, x.id); err != nil {
			return err
		} else if dropped {
			rep.Findings = append(rep.Findings, Finding{Kind: FindingStaleLink, Task: x.id, Dir: string(x.dir), Detail: "the same file as " + string(x.keep) + "/" + x.id + " under a second name, left by a move cut short; removed this name", Fixed: true})
			continue
		}
		name, err := m.Quarantine(x.dir, x.id)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		rep.Findings = append(rep.Findings, Finding{Kind: FindingDuplicate, Task: x.id, Dir: string(x.dir), Detail: "a second copy; moved to .fence/quarantine/" + name, Fixed: true})
	}
	return nil
}

// writeSynced writes a small file at path and syncs it and its directory,
// so that it survives a crash right after.
func writeSynced(path string, b []byte) error {
	f, err := journal.OpenRegular(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeSynced removes path, if there, durably.
func removeSynced(path string) error {
	if err := os.Remove(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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
	if err := insideTree(root); err != nil {
		return err
	}
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
