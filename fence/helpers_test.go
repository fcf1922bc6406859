package fence_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// bg is the context of calls that must not be cut short (cleanup checks).
var bg = context.Background()

// testDefaults are the tree settings of newTree.
var testDefaults = record.Defaults{TTL: 10 * time.Minute, MaxAttempts: 3}

// notices collects what a tree reports through Options.Notify.
type notices struct {
	mu   sync.Mutex
	list []fence.Notice
}

func (n *notices) add(x fence.Notice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.list = append(n.list, x)
}

// has reports whether a notice of kind about name was given.
func (n *notices) has(kind fence.NoticeKind, name string) bool {
	_, ok := n.of(kind)[name]
	return ok
}

// of returns the notices of one kind, by name.
func (n *notices) of(kind fence.NoticeKind) map[string]fence.Notice {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]fence.Notice{}
	for _, x := range n.list {
		if x.Kind == kind {
			out[x.Name] = x
		}
	}
	return out
}

func (n *notices) reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.list = nil
}

// newTree inits a tree in t.TempDir() with testDefaults and opens it.
func newTree(t *testing.T) *fence.Tree {
	tree, _ := newTreeWith(t, testDefaults, fence.Options{})
	return tree
}

// newTreeWith inits a tree with d and opens it with o (Notify is set to
// collect notices). At cleanup it checks the invariants every operation
// must keep, whatever the test did:
//
//   - replay --check finds nothing: the stored records match the event
//     log, the indexes and counts match the records, bbolt's own check is
//     clean, and the tree matches the journal;
//   - every task's file is in exactly one state directory, the one of its
//     state, and every file in a state directory is a known task;
//   - nothing is left in .fence/tmp;
//   - the tokens of claim events strictly increase in log order, and each
//     is above every token issued before.
func newTreeWith(t *testing.T, d record.Defaults, o fence.Options) (*fence.Tree, *notices) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "tree")
	if o.Clock == nil {
		o.Clock = testClock
	}
	res, err := fence.InitTree(root, d, fence.Options{Clock: o.Clock})
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	if !res.Created {
		t.Fatalf("Init of a new root reported an existing tree")
	}
	n := &notices{}
	o.Notify = n.add
	tree, err := fence.Open(root, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		checkInvariants(t, tree)
		if err := tree.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tree, n
}

// checkInvariants is newTree's cleanup check, callable mid-test too.
func checkInvariants(t *testing.T, tree *fence.Tree) {
	t.Helper()
	rep, err := tree.Replay(bg, true)
	if err != nil {
		t.Errorf("invariant: replay --check: %v", err)
		return
	}
	for _, f := range rep.Findings {
		t.Errorf("invariant: replay --check found %s", f.Describe())
	}

	evs, err := tree.Log(bg, fence.LogFilter{Heartbeats: true})
	if err != nil {
		t.Errorf("invariant: log: %v", err)
		return
	}
	ids := map[string]bool{}
	var last uint64
	for i, ev := range evs {
		if ev.Task != "" { // a compacted event names no task
			ids[ev.Task] = true
		}
		if i > 0 && ev.Seq <= evs[i-1].Seq {
			t.Errorf("invariant: log seqs not increasing at %d: %d after %d", i, ev.Seq, evs[i-1].Seq)
		}
		if ev.Type == record.EvClaim {
			if ev.Token <= last {
				t.Errorf("invariant: claim token %d (seq %d, task %s) not above the previous claim's %d", ev.Token, ev.Seq, ev.Task, last)
			}
			last = ev.Token
		}
	}
	st, err := tree.Status(bg)
	if err != nil {
		t.Errorf("invariant: status: %v", err)
		return
	}
	if last > st.LastToken {
		t.Errorf("invariant: a claim token %d is above the journal's counter %d", last, st.LastToken)
	}

	// Where every file is, by directory.
	found := map[string][]record.State{}
	for _, s := range record.States {
		entries, err := os.ReadDir(filepath.Join(tree.Root(), string(s)))
		if err != nil {
			t.Errorf("invariant: read %s/: %v", s, err)
			continue
		}
		for _, e := range entries {
			found[e.Name()] = append(found[e.Name()], s)
		}
	}
	// Tasks compact folded have no events left: their files name them.
	// A file the journal does not know fails its show below.
	for name := range found {
		ids[name] = true
	}
	counts := map[record.State]int{}
	for id := range ids {
		v, err := tree.Show(bg, id)
		if err != nil {
			t.Errorf("invariant: show %s: %v", id, err)
			continue
		}
		counts[v.Task.State]++
		if l := v.Task.Last; l != nil && l.By == record.EvMissing && v.Task.State != record.Available && v.Task.State != record.Claimed {
			// Settled as having no file (replay, claim-next): none expected.
			if got := found[id]; len(got) != 0 {
				t.Errorf("invariant: task %s was settled as missing but has files in %v", id, got)
			}
		} else if got := found[id]; !reflect.DeepEqual(got, []record.State{v.Task.State}) {
			t.Errorf("invariant: task %s is %s but its file is in %v", id, v.Task.State, got)
		}
		if v.Path != tree.Path(id, v.Task.State) {
			t.Errorf("invariant: show %s: path %s, want %s", id, v.Path, tree.Path(id, v.Task.State))
		}
		if (v.Task.State == record.Claimed) != (v.Task.Lease != nil) {
			t.Errorf("invariant: task %s is %s with lease %+v", id, v.Task.State, v.Task.Lease)
		}
	}
	for _, s := range record.States {
		if st.Counts[s] != counts[s] {
			t.Errorf("invariant: status counts %d %s, the records %d", st.Counts[s], s, counts[s])
		}
	}
	if len(st.Leases) != counts[record.Claimed] {
		t.Errorf("invariant: status shows %d leases for %d claimed tasks", len(st.Leases), counts[record.Claimed])
	}
	if left, err := os.ReadDir(filepath.Join(tree.Root(), ".fence", "tmp")); err == nil && len(left) != 0 {
		t.Errorf("invariant: .fence/tmp not empty: %v", names(left))
	}
}

func names(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// add adds a task with id, priority and content, failing the test on error.
func add(t *testing.T, tree *fence.Tree, id string, priority int64) fence.Result {
	t.Helper()
	res, err := tree.Add(bg, fence.AddRequest{ID: id, Priority: priority, Content: strings.NewReader("content of " + id)})
	if err != nil {
		t.Fatalf("Add %s: %v", id, err)
	}
	return res
}

// claim claims (named or next) as agent, failing the test on error.
func claim(t *testing.T, tree *fence.Tree, id, agent string) fence.ClaimResult {
	t.Helper()
	res, err := tree.Claim(bg, fence.ClaimRequest{ID: id, Agent: agent})
	if err != nil {
		t.Fatalf("Claim %q as %s: %v", id, agent, err)
	}
	return res
}

// fenced is one token-checked call on a tree, by name.
type fencedOp struct {
	name string
	call func(tree *fence.Tree, req fence.FencedRequest) error
}

var fencedOps = []fencedOp{
	{"heartbeat", func(tr *fence.Tree, r fence.FencedRequest) error { _, err := tr.Heartbeat(bg, r); return err }},
	{"complete", func(tr *fence.Tree, r fence.FencedRequest) error { _, err := tr.Complete(bg, r); return err }},
	{"release", func(tr *fence.Tree, r fence.FencedRequest) error { _, err := tr.Release(bg, r); return err }},
	{"fail", func(tr *fence.Tree, r fence.FencedRequest) error { _, err := tr.Fail(bg, r); return err }},
	{"verify", func(tr *fence.Tree, r fence.FencedRequest) error { _, err := tr.Verify(bg, r); return err }},
	{"claim-token", func(tr *fence.Tree, r fence.FencedRequest) error {
		_, err := tr.Claim(bg, fence.ClaimRequest{ID: r.ID, Token: r.Token, Agent: r.Agent})
		return err
	}},
}

// snapshot is everything a refused call must leave unchanged.
type snapshot struct {
	events int
	last   record.Event
	status fence.Status
	files  map[string][]string
	tasks  map[string]record.Task
}

func snap(t *testing.T, tree *fence.Tree) snapshot {
	t.Helper()
	evs, err := tree.Log(bg, fence.LogFilter{Heartbeats: true})
	if err != nil {
		t.Fatalf("Log: %v", err)
	}
	st, err := tree.Status(bg)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for i := range st.Leases {
		st.Leases[i].Left = 0 // depends on when Status ran
	}
	s := snapshot{events: len(evs), status: st, files: map[string][]string{}, tasks: map[string]record.Task{}}
	if len(evs) > 0 {
		s.last = evs[len(evs)-1]
	}
	for _, d := range []string{"inbox", "available", "claimed", "done", "failed"} {
		entries, err := os.ReadDir(filepath.Join(tree.Root(), d))
		if err != nil {
			t.Fatal(err)
		}
		s.files[d] = names(entries)
		sort.Strings(s.files[d])
	}
	for _, ev := range evs {
		if _, ok := s.tasks[ev.Task]; ok {
			continue
		}
		v, err := tree.Show(bg, ev.Task)
		if err != nil {
			t.Fatalf("Show %s: %v", ev.Task, err)
		}
		s.tasks[ev.Task] = v.Task
	}
	return s
}

// unchanged fails the test if the tree differs from before.
func unchanged(t *testing.T, tree *fence.Tree, before snapshot, what string) {
	t.Helper()
	after := snap(t, tree)
	if after.events != before.events || !reflect.DeepEqual(after.last, before.last) {
		t.Errorf("%s: the log changed: %d events (last %+v), was %d (last %+v)", what, after.events, after.last, before.events, before.last)
	}
	if !reflect.DeepEqual(after.status, before.status) {
		t.Errorf("%s: status changed:\n  %+v\nwas\n  %+v", what, after.status, before.status)
	}
	if !reflect.DeepEqual(after.files, before.files) {
		t.Errorf("%s: files moved:\n  %v\nwere\n  %v", what, after.files, before.files)
	}
	if !reflect.DeepEqual(after.tasks, before.tasks) {
		t.Errorf("%s: records changed:\n  %+v\nwere\n  %+v", what, after.tasks, before.tasks)
	}
}

// staleErr extracts a *StaleTokenError or fails the test.
func staleErr(t *testing.T, err error) *fence.StaleTokenError {
	t.Helper()
	var se *fence.StaleTokenError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want *fence.StaleTokenError", err, err)
	}
	return se
}

// eventOf returns the last event of type typ for task id.
func eventOf(t *testing.T, tree *fence.Tree, id string, typ record.EventType) record.Event {
	t.Helper()
	evs, err := tree.Log(bg, fence.LogFilter{Task: id, Heartbeats: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ {
			return evs[i]
		}
	}
	t.Fatalf("no %s event for %s", typ, id)
	return record.Event{}
}

// fileAt asserts that id's file is in dir with the content add gave it.
func fileAt(t *testing.T, tree *fence.Tree, id string, s record.State) {
	t.Helper()
	b, err := os.ReadFile(tree.Path(id, s))
	if err != nil {
		t.Errorf("task %s not in %s/: %v", id, s, err)
		return
	}
	if string(b) != "content of "+id {
		t.Errorf("task %s content = %q", id, b)
	}
}

// within fails the test if f does not return within a generous bound.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return (blocked?)", what)
	}
}
