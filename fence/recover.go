package fence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
)

// RecoverReport says what Recover did.
type RecoverReport struct {
	Root       string        `json:"root"`
	KeptAside  string        `json:"kept_aside,omitempty"` // where the damaged journal was moved
	Counts     map[State]int `json:"counts"`
	Freed      []string      `json:"freed"`       // tasks found in claimed/, now available
	FirstToken uint64        `json:"first_token"` // every new token is above this
	Findings   []Finding     `json:"findings"`    // entries left alone, copies quarantined
}

// JournalReadableError refuses to recover a journal that opens fine.
type JournalReadableError struct{ Path string }

func (e *JournalReadableError) Error() string {
	return fmt.Sprintf("the journal %s is readable: recover only rebuilds a lost or unreadable journal; to bring the tree in line with it run `fencectl replay`", e.Path)
}

// recoverOrder is which copy wins when a task's file is in several state
// directories: the most final state, so that nothing done is redone.
var recoverOrder = []State{Done, Failed, Claimed, Available}

// Recover rebuilds the journal of the tree at root from its directories,
// when the journal is lost or unreadable. The damaged file is renamed
// aside, never deleted. Every task comes back in the state its directory
// says; tasks in claimed/ have no lease any more, so they come back
// available (their files move there). New tokens start above any token
// the old journal can have issued: above the clock, and above the old
// counter if it can still be read. d gives the defaults when the old ones
// cannot be read.
func Recover(root string, d journal.Defaults, timeout time.Duration) (RecoverReport, error) {
	rep := RecoverReport{Counts: map[State]int{}, Freed: []string{}, Findings: []Finding{}}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return rep, invalidf("no task tree at %s: nothing to recover (`fencectl init` makes a new tree)", root)
	}
	m, err := fsmirror.Create(root) // the directories may be gone with the journal
	if err != nil {
		return rep, err
	}
	defer m.Close()
	m.Crash = crashAt
	rep.Root = m.Root()
	meta := filepath.Join(rep.Root, string(fsmirror.Meta))
	lock, err := journal.AcquireLock(filepath.Join(meta, journal.LockName), true, timeout)
	if err != nil {
		return rep, err
	}
	defer lock.Release()

	path := journal.Path(meta)
	seed := uint64(Now().UnixMicro())
	if exists, err := journal.Exists(meta); err != nil {
		return rep, err
	} else if exists {
		db, err := journal.Open(meta, journal.OpenOptions{ReadOnly: true, Timeout: timeout, BoltLockOnly: true})
		if err == nil {
			err = db.Verify()
			db.Close()
			if err == nil {
				return rep, &JournalReadableError{Path: path}
			}
		}
		var corrupt *journal.CorruptError
		var version *journal.VersionError
		if !errors.As(err, &corrupt) && !errors.As(err, &version) {
			return rep, err
		}
		if tok, ok := journal.SalvageToken(path); ok && tok >= seed {
			seed = tok + 1
		}
		if old, ok := journal.ReadDefaults(path); ok {
			d = old
		}
		aside := path + ".damaged-" + Now().UTC().Format("20060102T150405Z")
		if err := unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, aside, unix.RENAME_NOREPLACE); err != nil {
			return rep, fmt.Errorf("keep the damaged journal aside as %s: %w", aside, err)
		}
		if err := syncDir(meta); err != nil {
			return rep, err
		}
		rep.KeptAside = aside
	}
	if err := journal.CreateSeeded(meta, d, seed); err != nil {
		return rep, err
	}
	rep.FirstToken = seed
	crashAt("recover:after-create")

	// What the directories hold.
	where := map[string][]State{}
	for _, s := range States {
		entries, err := m.List(DirOf(s))
		if err != nil {
			return rep, err
		}
		for _, e := range entries {
			if err := fsmirror.ValidateID(e.Name); err != nil || e.Kind != fsmirror.Regular {
				why := string(e.Kind) + ": not a regular file, never followed; left in place"
				if err != nil {
					why = err.Error() + "; left in place"
				}
				rep.Findings = append(rep.Findings, Finding{Kind: "invalid_entry", Task: e.Name, Dir: string(DirOf(s)), Detail: why})
				continue
			}
			where[e.Name] = append(where[e.Name], s)
		}
	}
	ids := make([]string, 0, len(where))
	for id := range where {
		ids = append(ids, id)
	}
	sort.Strings(ids)

	db, err := journal.Open(meta, journal.OpenOptions{Timeout: timeout, BoltLockOnly: true})
	if err != nil {
		return rep, err
	}
	defer db.Close()
	var moves []move
	var extra []extraCopy
	err = db.Update(func(tx *journal.Tx) error {
		now := Now()
		for _, id := range ids {
			found := where[id]
			keep := found[0]
			for _, s := range recoverOrder {
				if containsState(found, s) {
					keep = s
					break
				}
			}
			to := keep
			if keep == Claimed {
				to = Available
				rep.Freed = append(rep.Freed, id)
			}
			ev := adoptEvent(id, DirOf(keep), to, d.MaxAttempts, now)
			ev.Reason = "recover"
			if _, _, err := commit(tx, nil, ev); err != nil {
				return err
			}
			rep.Counts[to]++
			moves = append(moves, move{id: id, from: DirOf(keep), to: DirOf(to)})
			for _, s := range found {
				if s != keep {
					extra = append(extra, extraCopy{id: id, dir: DirOf(s)})
				}
			}
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("rebuild the journal: %w", err)
	}
	crashAt("recover:after-commit")
	t := &Tree{root: rep.Root, metaDir: meta, mirror: m, batch: &batcher{}}
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
		name, err := m.Quarantine(x.dir, x.id)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, err
		}
		rep.Findings = append(rep.Findings, Finding{Kind: "duplicate", Task: x.id, Dir: string(x.dir), Detail: "a second copy; moved to .fence/quarantine/" + name, Fixed: true})
	}
	return rep, nil
}

func containsState(list []State, s State) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
