package fence

import (
	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal/record"
)

// DirOf returns the directory that holds tasks in state s.
func DirOf(s record.State) fsmirror.Dir {
	switch s {
	case record.Claimed:
		return fsmirror.Claimed
	case record.Done:
		return fsmirror.Done
	case record.Failed:
		return fsmirror.Failed
	default:
		return fsmirror.Available
	}
}

// stateOfDir is the inverse of DirOf for the four state directories.
func stateOfDir(d fsmirror.Dir) (record.State, bool) {
	for _, s := range record.States {
		if DirOf(s) == d {
			return s, true
		}
	}
	return "", false
}
