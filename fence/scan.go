package fence

import "github.com/fencectl/fencectl/fsmirror"

// dirScan is what the state directories hold, listed once: replay compares
// it with the journal, recover rebuilds the journal from it.
type dirScan struct {
	// where lists, for each task file, the state directories it is in, in
	// fsmirror.StateDirs order; order has the ids as first seen.
	where map[string][]fsmirror.Dir
	order []string
	// invalid reports the entries that are not task files (a bad name, a
	// symlink, a directory): never followed, never moved.
	invalid []Finding
}

// scanStateDirs lists the state directories of m. then ends the detail of
// each invalid entry: what the command does about it.
func scanStateDirs(m *fsmirror.Mirror, then string) (dirScan, error) {
	sc := dirScan{where: map[string][]fsmirror.Dir{}}
	for _, dir := range fsmirror.StateDirs {
		entries, err := m.List(dir)
		if err != nil {
			return sc, err
		}
		for _, e := range entries {
			if err := fsmirror.ValidateID(e.Name); err != nil {
				sc.invalid = append(sc.invalid, Finding{Kind: FindingInvalidEntry, Task: e.Name, Dir: string(dir), Detail: err.Error() + "; " + then})
				continue
			}
			if e.Kind != fsmirror.Regular {
				sc.invalid = append(sc.invalid, Finding{Kind: FindingInvalidEntry, Task: e.Name, Dir: string(dir), Detail: string(e.Kind) + ": not a regular file, never followed; " + then})
				continue
			}
			if len(sc.where[e.Name]) == 0 {
				sc.order = append(sc.order, e.Name)
			}
			sc.where[e.Name] = append(sc.where[e.Name], dir)
		}
	}
	return sc, nil
}
