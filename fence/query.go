package fence

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Status is a summary of the tree.
type Status struct {
	Root      string
	Counts    map[record.State]int
	Leases    []LeaseView
	Defaults  record.Defaults
	LastToken uint64
	Journal   JournalInfo // which store holds the journal, and where
	// Blocked counts the waiting tasks that wait for others (they are
	// in Counts' waiting too).
	Blocked int
}

// LeaseView is one live lease as status shows it.
type LeaseView struct {
	Task     string
	Agent    string
	Token    uint64
	Deadline time.Time
	Left     time.Duration // negative once expired and not yet reaped
	Attempts int
	// Ended says why a lease that is still in the journal is over, to be
	// reaped by the next claim or reap: ReasonHolderDied (its run's
	// process is gone), ReasonHostRebooted (claimed before this boot), or
	// "" for a live one (or one whose deadline passed: Left says).
	Ended string
}

// Defaults reads the tree's settings (default lease length and attempts),
// so that a caller can check its own flags against them before it claims.
func (t *Tree) Defaults(ctx context.Context) (record.Defaults, error) {
	var d record.Defaults
	err := t.read(ctx, func(tx journal.Tx, _ time.Time) error {
		var err error
		d, err = tx.Defaults()
		return err
	})
	return d, err
}

// Status reads counts per state (O(1)) and every live lease.
func (t *Tree) Status(ctx context.Context) (Status, error) {
	st := Status{Root: t.root, Journal: t.Journal()}
	err := t.read(ctx, func(tx journal.Tx, now time.Time) error {
		st.Leases = nil // a store may run this more than once
		st.Counts = tx.Counts()
		st.Blocked = tx.Blocked()
		st.LastToken = tx.LastToken()
		d, err := tx.Defaults()
		if err != nil {
			return err
		}
		st.Defaults = d
		dead, err := t.deadHolders(tx, false)
		if err != nil {
			return err
		}
		return tx.Leases(func(id string) error {
			rec, ok, err := tx.Task(id)
			if err != nil || !ok || rec.Lease == nil {
				return err
			}
			v := LeaseView{
				Task: id, Agent: rec.Lease.Agent, Token: rec.Lease.Token, Deadline: rec.Lease.Deadline,
				Left: rec.Lease.Deadline.Sub(now), Attempts: rec.Attempts,
			}
			d, died := dead[rec.Lease.Token]
			switch {
			case died && d.unstarted:
				v.Ended = ReasonDiedUnstarted
			case died:
				v.Ended = ReasonHolderDied
			case t.leaseClock != nil && t.leaseClock.claimedBefore(*rec.Lease):
				v.Ended = ReasonHostRebooted
			}
			st.Leases = append(st.Leases, v)
			return nil
		})
	})
	return st, err
}

// TaskView is everything `show` prints of one task.
type TaskView struct {
	Task    record.Task
	Path    string
	Events  []record.Event // most recent last
	Journal JournalInfo    // which store holds the journal, and where
	// WaitsFor, for a task with dependencies, is each task it waits for
	// and where that is.
	WaitsFor []Dependency
	// FoldedTo, if not 0, says that compact folded the task's events up
	// to this seq into its record: Events holds only the later ones.
	FoldedTo uint64
}

// showEvents is how many recent events Show returns.
const showEvents = 20

// Show reads one task's record and its recent events.
func (t *Tree) Show(ctx context.Context, id string) (TaskView, error) {
	if err := fsmirror.ValidateID(id); err != nil {
		return TaskView{}, invalidf(InputID, RuleFormat, id, "%v", err)
	}
	v := TaskView{Journal: t.Journal()}
	err := t.read(ctx, func(tx journal.Tx, _ time.Time) error {
		rec, ok, err := tx.Task(id)
		if err != nil {
			return err
		}
		if !ok {
			return &NoSuchTaskError{Task: id}
		}
		v.Task, v.Path = rec, t.Path(id, rec.State)
		if v.WaitsFor, err = dependencies(tx, rec); err != nil {
			return err
		}
		if _, v.FoldedTo, _, err = tx.FoldedTask(id); err != nil {
			return err
		}
		evs, err := lastEvents(tx, LogFilter{Task: id, Limit: showEvents, Heartbeats: true})
		v.Events = evs
		return err
	})
	return v, err
}

// ListFilter selects and pages tasks for List.
type ListFilter struct {
	State record.State // only tasks in this state ("": every state)
	Agent string       // only claimed tasks whose lease this agent holds ("": any)
	After string       // the cursor: start strictly after this id ("": from the first)
	Limit int          // at most this many tasks (0: all)
	// Blocked selects the waiting tasks that wait for others.
	Blocked bool
	// Labels selects the tasks that carry every one of these labels.
	Labels []string
}

// ListPage is one page of List: the tasks in id order, and whether more
// tasks that the filter selects follow the last one (the next page's
// cursor is its id).
type ListPage struct {
	Tasks []record.Task
	More  bool
}

// List reads a page of tasks in id order, from the first id after
// f.After. It reads the journal from the cursor on (TasksFrom), so a page
// costs the same whatever the journal holds; a filter is applied while
// reading, so a page of a rare state or agent reads on until it is full.
func (t *Tree) List(ctx context.Context, f ListFilter) (ListPage, error) {
	if err := f.check(); err != nil {
		return ListPage{}, err
	}
	var p ListPage
	err := t.read(ctx, func(tx journal.Tx, _ time.Time) error {
		p = ListPage{} // a store may run this more than once
		return tx.TasksFrom(f.After, func(rec record.Task) (bool, error) {
			if !f.selects(rec) {
				return true, nil
			}
			if f.Limit > 0 && len(p.Tasks) == f.Limit {
				p.More = true
				return false, nil
			}
			p.Tasks = append(p.Tasks, rec)
			return true, nil
		})
	})
	return p, err
}

// check refuses a filter that names no state, an invalid cursor, a
// negative limit, or an agent with a state no lease is in.
func (f ListFilter) check() error {
	if f.State != "" && !slices.Contains(record.States, f.State) {
		return invalidValue(InputState, RuleFormat, string(f.State), "must be one of "+strings.Join(StateNames(), ", "))
	}
	if f.After != "" {
		if err := fsmirror.ValidateID(f.After); err != nil {
			var bad *fsmirror.InvalidNameError
			why := err.Error()
			if errors.As(err, &bad) {
				why = bad.Why
			}
			return invalidValue(InputAfter, RuleFormat, f.After, why+"; the cursor is the id of the last task of the previous page")
		}
	}
	if f.Limit < 0 {
		return invalidValue(InputLimit, RuleRange, f.Limit, "must be 0 (all) or more")
	}
	if f.Blocked && f.State != "" && f.State != record.Waiting {
		return invalidValue(InputState, RuleConflict, string(f.State), "only waiting tasks are blocked: leave the state out, or select "+string(record.Waiting))
	}
	if f.Blocked && f.Agent != "" {
		return invalidValue(InputState, RuleConflict, nil, "a blocked task has no agent: select blocked tasks or an agent's, not both")
	}
	for _, l := range f.Labels {
		if err := fsmirror.ValidateLabel(l); err != nil {
			return invalidf(InputLabel, RuleFormat, l, "%v", err)
		}
	}
	if f.Agent != "" && f.State != "" && f.State != record.Claimed {
		return invalidValue(InputState, RuleConflict, string(f.State), "only claimed tasks have an agent: leave the state out, or select "+string(record.Claimed))
	}
	return nil
}

// selects reports whether rec passes the filter (the cursor and limit
// aside).
func (f ListFilter) selects(rec record.Task) bool {
	if f.State != "" && rec.State != f.State || f.Blocked && !rec.Blocked() {
		return false
	}
	for _, l := range f.Labels {
		if _, found := slices.BinarySearch(rec.Labels, l); !found {
			return false
		}
	}
	return f.Agent == "" || (rec.State == record.Claimed && rec.Lease != nil && rec.Lease.Agent == f.Agent)
}

// LogFilter selects events for Log.
type LogFilter struct {
	Task       string    // only this task's events
	Since      time.Time // only events at or after this time
	Limit      int       // only the newest Limit (0: all)
	Heartbeats bool      // include heartbeat events (hidden by default)
}

// Log returns the audit trail, oldest first.
func (t *Tree) Log(ctx context.Context, f LogFilter) ([]record.Event, error) {
	if f.Task != "" {
		if err := fsmirror.ValidateID(f.Task); err != nil {
			return nil, invalidf(InputID, RuleFormat, f.Task, "%v", err)
		}
	}
	if f.Limit < 0 {
		return nil, invalidValue(InputLimit, RuleRange, f.Limit, "must be 0 (all) or more")
	}
	var evs []record.Event
	err := t.read(ctx, func(tx journal.Tx, _ time.Time) error {
		if f.Task != "" {
			if _, ok, err := tx.Task(f.Task); err != nil {
				return err
			} else if !ok {
				return &NoSuchTaskError{Task: f.Task}
			}
		}
		var err error
		evs, err = lastEvents(tx, f)
		return err
	})
	return evs, err
}

// lastEvents reads the log from the newest back, keeping what f selects,
// and returns it oldest first. Events are appended in time order, so the
// scan stops at the first one older than f.Since.
func lastEvents(tx journal.Tx, f LogFilter) ([]record.Event, error) {
	var evs []record.Event
	scan := tx.EventsBackward
	if f.Task != "" {
		scan = func(fn func(record.Event) (bool, error)) error { return tx.TaskEventsBackward(f.Task, fn) }
	}
	err := scan(func(ev record.Event) (bool, error) {
		if !f.Since.IsZero() && ev.Time.Before(f.Since) {
			return false, nil
		}
		if (f.Task == "" || ev.Task == f.Task) && (f.Heartbeats || ev.Type != record.EvHeartbeat) {
			evs = append(evs, ev)
		}
		return f.Limit == 0 || len(evs) < f.Limit, nil
	})
	for i, j := 0, len(evs)-1; i < j; i, j = i+1, j-1 {
		evs[i], evs[j] = evs[j], evs[i]
	}
	return evs, err
}
