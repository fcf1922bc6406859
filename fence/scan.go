package fence

import (
	"slices"
	"strings"

	"github.com/fencectl/fencectl/fsmirror"
)

// dirScan is what the state directories hold, listed once: replay compares
// it with the journal, recover rebuilds the journal from it.
type dirScan struct {
	// where lists, for each task file, the state directories it is in, in
	// fsmirror.StateDirs order; order has the ids as first seen, in the
	// directories' own order (no sort of a million names: a caller that
	// acts on a few sorts those).
	where map[string][]fsmirror.Dir
	order []string
	// invalid reports the entries that are not task files (a bad name, a
	// symlink, a directory): never followed, never moved.
	invalid []Finding
}

// scanInBackground starts scanStateDirs on another goroutine and returns
// the wait for its result. A command that holds the tree's lock (no writer
// moves a file meanwhile) lists the directories, which is mostly time in
// the kernel, while it reads the journal on the other core: replay and the
// reconcile after a reboot read both in full, and at a million tasks the
// listing is a quarter of replay's time once compact has made the journal
// small.
func scanInBackground(m *fsmirror.Mirror, then string) func() (dirScan, error) {
	type result struct {
		sc  dirScan
		err error
	}
	done := make(chan result, 1)
	go func() {
		sc, err := scanStateDirs(m, then)
		done <- result{sc, err}
	}()
	return func() (dirScan, error) {
		r := <-done
		return r.sc, r.err
	}
}

// scanStateDirs lists the state directories of m. then ends the detail of
// each invalid entry: what the command does about it.
func scanStateDirs(m *fsmirror.Mirror, then string) (dirScan, error) {
	lists := make([][]fsmirror.Entry, len(fsmirror.StateDirs))
	n := 0
	for i, dir := range fsmirror.StateDirs {
		entries, err := m.Entries(dir) // in no order: sorted below where it matters
		if err != nil {
			return dirScan{}, err
		}
		lists[i], n = entries, n+len(entries)
	}
	// A tree of a million tasks has a million entries: the map is made
	// once at its size, and a file in one directory (nearly all) shares
	// its one-element list with every other file there (capacity 1, so a
	// second directory's append copies it) instead of allocating one.
	sc := dirScan{where: make(map[string][]fsmirror.Dir, n), order: make([]string, 0, n)}
	dirs := slices.Clone(fsmirror.StateDirs) // this scan's own: never the package's
	for i, dir := range dirs {
		only := dirs[i : i+1 : i+1]
		for _, e := range lists[i] {
			if err := fsmirror.ValidateID(e.Name); err != nil {
				sc.invalid = append(sc.invalid, Finding{Kind: FindingInvalidEntry, Task: e.Name, Dir: string(dir), Detail: err.Error() + "; " + then})
				continue
			}
			if e.Kind != fsmirror.Regular {
				sc.invalid = append(sc.invalid, Finding{Kind: FindingInvalidEntry, Task: e.Name, Dir: string(dir), Detail: string(e.Kind) + ": not a regular file, never followed; " + then})
				continue
			}
			if prev, seen := sc.where[e.Name]; seen {
				sc.where[e.Name] = append(prev, dir)
				continue
			}
			sc.order = append(sc.order, e.Name)
			sc.where[e.Name] = only
		}
	}
	// Each directory's invalid entries by name, as a person reads them.
	rank := func(d string) int { return slices.Index(dirs, fsmirror.Dir(d)) }
	slices.SortStableFunc(sc.invalid, func(a, b Finding) int {
		if c := rank(a.Dir) - rank(b.Dir); c != 0 {
			return c
		}
		return strings.Compare(a.Task, b.Task)
	})
	return sc, nil
}
