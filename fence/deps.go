package fence

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Dependencies and labels.
//
// A task added (or set) with After waits for those tasks: it is blocked,
// in waiting/ (see waiting.go), so no claim takes it; a named claim is
// refused with the ids it waits for. The journal keeps a reverse index (dependency →
// dependents), so the commit that makes a task done also records, for
// each task waiting for it, a dep_done event that removes it from After
// (DepDoneEvent): one with nothing left is ready in that same commit.
// A dependency that fails or is cancelled keeps its dependents blocked;
// requeue it and complete it to release them. Only set can close a cycle
// (a new task is nobody's dependency yet), and it is refused.

// checkDeps checks the ids a task is to wait for, before any lock.
func checkDeps(id string, after []string) error {
	seen := map[string]bool{}
	for _, dep := range after {
		if err := fsmirror.ValidateID(dep); err != nil {
			return invalidf(InputDeps, RuleFormat, dep, "%v", err)
		}
		if dep == id && id != "" {
			return invalidf(InputDeps, RuleCycle, dep, "task %s cannot wait for itself", id)
		}
		if seen[dep] {
			return invalidf(InputDeps, RuleConflict, dep, "dependency %s is named twice", dep)
		}
		seen[dep] = true
	}
	return nil
}

// checkLabels checks labels and returns them sorted, without duplicates.
func checkLabels(labels []string) ([]string, error) {
	for _, l := range labels {
		if err := fsmirror.ValidateLabel(l); err != nil {
			return nil, invalidf(InputLabel, RuleFormat, l, "%v", err)
		}
	}
	return NormalizeLabels(labels), nil
}

// pendingDeps reads the tasks of after and returns those not done yet,
// in the order given: a task already done is not waited for. An unknown
// one is a *NoSuchTaskError.
func pendingDeps(tx journal.Tx, after []string) ([]string, error) {
	var out []string
	for _, dep := range after {
		rec, ok, err := tx.Task(dep)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &NoSuchTaskError{Task: dep}
		}
		if rec.State != record.Done {
			out = append(out, dep)
		}
	}
	return out, nil
}

// checkCycle refuses after for task id if one of those tasks waits,
// directly or through others, for id. It follows After only (done tasks
// wait for nothing), reading each task once.
func checkCycle(tx journal.Tx, id string, after []string) error {
	seen := map[string]bool{}
	var path []string
	var walk func(cur string) (bool, error)
	walk = func(cur string) (bool, error) {
		if cur == id {
			return true, nil
		}
		if seen[cur] {
			return false, nil
		}
		seen[cur] = true
		rec, ok, err := tx.Task(cur)
		if err != nil || !ok {
			return false, err
		}
		for _, next := range rec.After {
			path = append(path, next)
			if found, err := walk(next); found || err != nil {
				return found, err
			}
			path = path[:len(path)-1]
		}
		return false, nil
	}
	for _, dep := range after {
		path = []string{dep}
		found, err := walk(dep)
		if err != nil {
			return err
		}
		if found {
			return invalidf(InputDeps, RuleCycle, dep, "task %s cannot wait for %s: %s waits for %s, a cycle (%s → %s); nothing changed",
				id, dep, dep, id, id, strings.Join(path, " → "))
		}
	}
	return nil
}

// Dependency is one task another waits for, as show explains it.
type Dependency struct {
	ID    string
	State record.State
	// Why, for a dependency that failed, is how it ended (its reason):
	// its dependents stay blocked until it is requeued and done.
	Why string
}

// dependencies reads the tasks rec waits for.
func dependencies(tx journal.Tx, rec record.Task) ([]Dependency, error) {
	var out []Dependency
	for _, id := range rec.After {
		d := Dependency{ID: id}
		dep, ok, err := tx.Task(id)
		if err != nil {
			return nil, err
		}
		if ok {
			d.State = dep.State
			if dep.State == record.Failed && dep.Last != nil {
				d.Why = dep.Last.Reason
				if d.Why == "" {
					d.Why = string(dep.Last.By)
				}
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// SetRequest changes what may change of a task nobody holds. A nil field
// is left as it is; an empty, non-nil Labels or After clears it.
type SetRequest struct {
	ID       string
	Priority *int64
	Labels   []string
	After    []string
	Agent    string // recorded, never compared
}

// Set changes the priority, labels and dependencies of a task that is
// not claimed, recording a set event that carries all three; the task
// and the indexes follow in the same commit (a task given unfinished
// dependencies goes to waiting/, one that loses its last to available/
// unless it is scheduled for later). A claimed task is
// refused (release it first), a done or failed one too (NotAvailableError);
// dependencies that would close a cycle are an *InvalidInputError.
// Nothing to change answers Retry.
func (t *Tree) Set(ctx context.Context, req SetRequest) (Result, error) {
	if err := fsmirror.ValidateID(req.ID); err != nil {
		return Result{}, invalidf(InputID, RuleFormat, req.ID, "%v", err)
	}
	if req.Priority == nil && req.Labels == nil && req.After == nil {
		return Result{}, invalidValue(InputID, RuleMissing, nil, "name something to change: --priority, --label or --after")
	}
	if err := checkDeps(req.ID, req.After); err != nil {
		return Result{}, err
	}
	labels, err := checkLabels(req.Labels)
	if err != nil {
		return Result{}, err
	}
	return t.operatorTx(ctx, record.EvSet, req.ID, func(tx journal.Tx, rec record.Task, now time.Time) (record.Event, error) {
		if rec.State != record.Available && rec.State != record.Waiting {
			return record.Event{}, &NotAvailableError{Task: rec.ID, State: rec.State, Op: "set"}
		}
		ev := record.Event{Time: now, Type: record.EvSet, Task: rec.ID, From: rec.State, To: rec.State, Agent: req.Agent,
			Priority: rec.Priority, Labels: rec.Labels, After: rec.After, NotBefore: rec.NotBefore}
		if req.Priority != nil {
			ev.Priority = *req.Priority
		}
		if req.Labels != nil {
			ev.Labels = labels
		}
		if req.After != nil {
			after, err := pendingDeps(tx, req.After)
			if err != nil {
				return record.Event{}, err
			}
			if err := checkCycle(tx, rec.ID, after); err != nil {
				return record.Event{}, err
			}
			ev.After = after
		}
		if ev.Priority == rec.Priority && slices.Equal(ev.Labels, rec.Labels) && slices.Equal(ev.After, rec.After) {
			return ev, errNoChange
		}
		// Given dependencies not done yet it waits; rid of its last (and
		// not scheduled for later) it is available, in this commit.
		ev.To, ev.NotBefore = restState(ev.After, rec.NotBefore, now)
		return ev, nil
	})
}

// checkClaimLabels checks the labels a claim asks for; they select among
// ready tasks, so a claim that names its task (or restores a token) takes
// none.
func checkClaimLabels(labels []string, named bool) error {
	if len(labels) > 0 && named {
		return invalidf(InputLabel, RuleConflict, labels[0], "labels select among the ready tasks: name a task or ask for labels, not both")
	}
	for _, l := range labels {
		if err := fsmirror.ValidateLabel(l); err != nil {
			return invalidf(InputLabel, RuleFormat, l, "%v", err)
		}
	}
	return nil
}

// hasLabels reports whether rec carries every one of labels.
func hasLabels(rec record.Task, labels []string) bool {
	for _, l := range labels {
		if _, found := slices.BinarySearch(rec.Labels, l); !found {
			return false
		}
	}
	return true
}

// unblockInline is how many of a task's dependents the commit that makes
// it done first releases on a store whose transactions are bounded
// (journal.Unblocker: etcd); later commits release the rest. Each costs
// about five operations of a transaction, and etcd takes 128 by default:
// 8 leave room for the completion itself and the rest of its group. A
// server started with a lower --max-txn-ops refuses that commit: it is
// made again releasing none (commitAlone) and the tree releases half as
// many from then on (fitting).
const unblockInline = 8

// fitting is what a tree has learned of how much one commit may carry
// on a store whose transactions are bounded: etcd's --max-txn-ops is
// 128 by default, and operators lower it (or raise it) on the server,
// where no client can read it. Commits whose size depends on data start
// at the sizes that fit the default and halve on a refusal, and the
// halving is kept, as inChunks keeps its chunk size, so that one tree
// pays a refused commit per lesson rather than per commit. The zero
// value knows nothing (the default sizes); the views of a tree
// (withTimeout) share it.
type fitting struct {
	// inline counts halvings of unblockInline: the dependents a
	// completion's commit releases beside it (down to none).
	inline atomic.Int32
	// chunk counts halvings of catchUpChunk: the reaps, promotions and
	// releases one housekeeping commit carries (down to one).
	chunk atomic.Int32
}

// maxHalvings is as many halvings as take the sizes above to their least.
const maxHalvings = 4

// inlineReleases is how many dependents a completion's commit releases.
func (f *fitting) inlineReleases() int { return unblockInline >> f.inline.Load() }

// chunkSize is how many items a housekeeping commit carries.
func (f *fitting) chunkSize() int { return max(catchUpChunk>>f.chunk.Load(), 1) }

// fewerInline halves inlineReleases, from seen (the number refused),
// for every later commit.
func (f *fitting) fewerInline(seen int) { atLeast(&f.inline, halvings(unblockInline, seen)) }

// smallerChunk halves chunkSize, from seen (the size refused), for every
// later commit.
func (f *fitting) smallerChunk(seen int) { atLeast(&f.chunk, halvings(catchUpChunk, seen)) }

// halvings is how many halvings take start below seen (maxHalvings at
// most).
func halvings(start, seen int) int32 {
	h := int32(0)
	for start>>h >= seen && h < maxHalvings {
		h++
	}
	return h
}

// atLeast raises *n to h, unless it is there already: two commits
// refused at the same size halve it once.
func atLeast(n *atomic.Int32, h int32) {
	for {
		cur := n.Load()
		if cur >= h || n.CompareAndSwap(cur, h) {
			return
		}
	}
}

// inlineReleases is how many dependents a completion's commit on this
// tree releases beside it (see unblockInline); none in a commit made
// again because it was too large (lean, see commitAlone).
func (t *Tree) inlineReleases() int {
	if t.batch.lean {
		return 0
	}
	return t.batch.fit.inlineReleases()
}

// unblockDependents records, in the transaction that made dep done, that
// tasks waiting for it no longer do (DepDoneEvent): those that wait for
// nothing else (and for no time) go to available/ in this commit; it
// returns the events, for their moves. The reverse index names them, so
// this reads only dep's dependents. On a bounded store it releases
// inline of them (inlineReleases) and notes dep if more wait: the
// group's leader then releases them before it answers (finishUnblocking),
// and after a crash the next writer to sweep does (resumeUnblocking).
func unblockDependents(tx journal.Tx, dep string, now time.Time, inline int) ([]record.Event, error) {
	u, bounded := tx.(journal.Unblocker)
	limit := -1
	if bounded {
		limit = inline
	}
	evs, more, err := releaseDependents(tx, dep, now, limit)
	if err == nil && more {
		err = u.NoteUnblocking(dep)
	}
	return evs, err
}

// releaseDependents records a dep_done for up to limit (below 0: all) of
// the tasks waiting for dep; more says that others are left.
func releaseDependents(tx journal.Tx, dep string, now time.Time, limit int) (evs []record.Event, more bool, err error) {
	var ids []string
	err = tx.Dependents(dep, func(id string) bool {
		if limit >= 0 && len(ids) == limit {
			more = true
			return false
		}
		ids = append(ids, id)
		return true
	})
	if err != nil {
		return nil, false, err
	}
	for _, id := range ids {
		d, ok, err := tx.Task(id)
		if err != nil {
			return nil, false, err
		}
		if !ok || !slices.Contains(d.After, dep) {
			continue // the index and the record disagree: trust the record
		}
		_, ev, err := commitOne(tx, &d, DepDoneEvent(d, dep, now))
		if err != nil {
			return nil, false, err
		}
		evs = append(evs, ev)
	}
	return evs, more, nil
}

// resumeUnblocking releases up to limit (0: no limit) of the dependents
// that noted done tasks left waiting (see unblockDependents), and drops
// each note once its task has none left. A noted task that is not done
// any more was requeued before the rest were released: they wait for it
// again, as they would for any task not done, and its note is dropped.
// Stores without notes: nothing.
func resumeUnblocking(tx journal.Tx, now time.Time, limit int) ([]record.Event, error) {
	u, ok := tx.(journal.Unblocker)
	if !ok {
		return nil, nil
	}
	var deps []string
	if err := u.Unblocking(func(dep string) bool { deps = append(deps, dep); return true }); err != nil {
		return nil, err
	}
	var evs []record.Event
	for _, dep := range deps {
		if limit > 0 && len(evs) >= limit {
			break
		}
		rec, ok, err := tx.Task(dep)
		if err != nil {
			return nil, err
		}
		left := false
		if ok && rec.State == record.Done {
			var got []record.Event
			rest := -1
			if limit > 0 {
				rest = limit - len(evs)
			}
			if got, left, err = releaseDependents(tx, dep, now, rest); err != nil {
				return nil, err
			}
			evs = append(evs, got...)
		}
		if !left {
			if err := u.DropUnblocking(dep); err != nil {
				return nil, err
			}
		}
	}
	return evs, nil
}

// notedUnblocking reports whether tx noted a task whose dependents are
// left to release.
func notedUnblocking(tx journal.Tx) bool {
	u, ok := tx.(journal.Unblocker)
	return ok && u.NotedUnblocking()
}

// finishUnblocking releases, after a group's commits, the dependents
// they left waiting for the tasks they made done, a few per commit
// (catchUp), so that a caller who completed a task finds its dependents
// available, as on a store that releases them all in one commit. A
// failure here fails no caller: their commits stand, and the next writer
// to sweep finishes the job.
func (t *Tree) finishUnblocking(db journal.Store) {
	if !t.batch.unblocking {
		return
	}
	t.batch.unblocking = false
	if _, err := t.catchUp(db); err != nil {
		t.notify(NoticeWarning, string(fsmirror.Waiting), fmt.Sprintf("releasing the dependents of a completed task: %v; the next claim goes on with it", err))
	}
}
