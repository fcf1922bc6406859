package fence

import (
	"fmt"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal/record"
)

// DirOf returns the directory that holds tasks in state s. A state that is
// none of the five (a damaged or hostile record) has no directory: that is
// an error, never available/, so such a record cannot move a file.
func DirOf(s record.State) (fsmirror.Dir, error) {
	switch s {
	case record.Waiting:
		return fsmirror.Waiting, nil
	case record.Available:
		return fsmirror.Available, nil
	case record.Claimed:
		return fsmirror.Claimed, nil
	case record.Done:
		return fsmirror.Done, nil
	case record.Failed:
		return fsmirror.Failed, nil
	}
	return "", fmt.Errorf("task state %q is not one of waiting, available, claimed, done, failed: no directory holds it", string(s))
}

// StateNames names every state, in lifecycle order (record.States), for
// messages and help.
func StateNames() []string {
	names := make([]string, len(record.States))
	for i, s := range record.States {
		names[i] = string(s)
	}
	return names
}

// stateOfDir is the inverse of DirOf for the five state directories.
func stateOfDir(d fsmirror.Dir) (record.State, bool) {
	for _, s := range record.States {
		if sd, _ := DirOf(s); sd == d {
			return s, true
		}
	}
	return "", false
}
