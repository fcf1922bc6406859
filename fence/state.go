package fence

import (
	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
)

// State is where a task is in its lifecycle.
type State = journal.State

const (
	// Available tasks wait in available/. They leave it by a claim (to
	// Claimed), by any agent.
	Available = journal.Available
	// Claimed tasks sit in claimed/ under a lease. They leave it by complete
	// (Done), release or fail below max attempts (Available), fail at max
	// attempts (Failed), all with the current token; by reap once the lease
	// expired (Available or Failed); and by an operator's revoke (Available).
	Claimed = journal.Claimed
	// Done tasks sit in done/. Only an operator's requeue moves them (to
	// Available).
	Done = journal.Done
	// Failed tasks reached max attempts and sit in failed/, the dead letter
	// directory. Only an operator's requeue moves them (to Available).
	Failed = journal.Failed
)

// DirOf returns the directory that holds tasks in state s.
func DirOf(s State) fsmirror.Dir {
	switch s {
	case Claimed:
		return fsmirror.Claimed
	case Done:
		return fsmirror.Done
	case Failed:
		return fsmirror.Failed
	default:
		return fsmirror.Available
	}
}

// stateOfDir is the inverse of DirOf for the four state directories.
func stateOfDir(d fsmirror.Dir) (State, bool) {
	for _, s := range journal.States {
		if DirOf(s) == d {
			return s, true
		}
	}
	return "", false
}
