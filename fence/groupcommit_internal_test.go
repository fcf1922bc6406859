package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// groupTree makes a tree with tasks a, b and c claimed, and returns their
// tokens by id.
func groupTree(t *testing.T) (*Tree, map[string]uint64) {
	t.Helper()
	tree := openGroupTree(t, 5*time.Second)
	ctx := context.Background()
	tokens := map[string]uint64{}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := tree.Add(ctx, AddRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
		c, err := tree.Claim(ctx, ClaimRequest{ID: id, Agent: "agent-" + id, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tokens[id] = c.Token
	}
	return tree, tokens
}

// beatOp is a group member that heartbeats task id to an hour from now,
// counting its runs; with refuse set it then returns refuse, having written.
func beatOp(id string, token uint64, refuse error, runs *int) *pendingOp {
	fn := func(tx journal.Tx, now time.Time) ([]record.Event, error) {
		*runs++
		rec, ok, err := tx.Task(id)
		if err != nil || !ok {
			return nil, errors.Join(err, errors.New("no task "+id))
		}
		deadline := now.Add(time.Hour)
		_, ev, err := commit(tx, &rec, record.Event{Time: now, Type: record.EvHeartbeat, Task: id,
			From: record.Claimed, To: record.Claimed, Agent: rec.Lease.Agent, Token: token, Deadline: &deadline})
		if err != nil {
			return nil, err
		}
		if refuse != nil {
			return nil, refuse
		}
		return []record.Event{ev}, nil
	}
	return &pendingOp{op: "heartbeat", fn: fn, done: make(chan struct{}), lead: make(chan struct{}, 1)}
}

// taskState is what a refused operation must leave as it was: the record
// and the task's events.
func taskState(t *testing.T, tree *Tree, id string) (record.Task, []record.Event) {
	t.Helper()
	v, err := tree.Show(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v.Task, v.Events
}

// An operation that writes and then refuses inside a group commits
// nothing, while the others in the group commit: bbolt's Batch semantics.
// Before, the group committed the refused operation's heartbeat.
func TestGroup_WriteThenRefuseCommitsNothing(t *testing.T) {
	for _, refuse := range []error{
		&InvalidInputError{Msg: "refused after writing"},   // a refusal
		&StaleTokenError{Reason: ReasonNotHeld, Task: "b"}, // another refusal
		errors.New("disk on fire"),                         // not a refusal
	} {
		t.Run(refuse.Error(), func(t *testing.T) {
			tree, tok := groupTree(t)
			recB, evsB := taskState(t, tree, "b")
			recA, _ := taskState(t, tree, "a")
			var runsA, runsB, runsC int
			a := beatOp("a", tok["a"], nil, &runsA)
			b := beatOp("b", tok["b"], refuse, &runsB)
			c := beatOp("c", tok["c"], nil, &runsC)
			tree.runGroup([]*pendingOp{a, b, c})

			if b.err != refuse || b.committed || b.evs != nil {
				t.Errorf("refusing op: err %v, committed %v, evs %v; want its own error, nothing committed", b.err, b.committed, b.evs)
			}
			if r, e := taskState(t, tree, "b"); !reflect.DeepEqual(r, recB) || !reflect.DeepEqual(e, evsB) {
				t.Errorf("the refused op's writes committed:\n record %+v\n   was %+v\n events %d, were %d", r, recB, len(e), len(evsB))
			}
			for _, p := range []*pendingOp{a, c} {
				if p.err != nil || !p.committed || len(p.evs) != 1 {
					t.Errorf("other op: err %v, committed %v, evs %d; want committed", p.err, p.committed, len(p.evs))
				}
			}
			if r, _ := taskState(t, tree, "a"); !r.Lease.Deadline.After(recA.Lease.Deadline.Add(30 * time.Minute)) {
				t.Errorf("a's heartbeat did not commit: deadline %s, was %s", r.Lease.Deadline, recA.Lease.Deadline)
			}
			// a ran in the rolled-back attempt and again without b; b ran in
			// the group and alone; c, after b, only without it.
			if runsA != 2 || runsB != 2 || runsC != 1 {
				t.Errorf("runs a=%d b=%d c=%d, want 2 2 1", runsA, runsB, runsC)
			}
		})
	}
}

// Alone, an operation that writes then refuses rolls back what it wrote.
func TestGroup_WriteThenRefuseAlone(t *testing.T) {
	tree, tok := groupTree(t)
	rec, evs := taskState(t, tree, "b")
	var runs int
	b := beatOp("b", tok["b"], &InvalidInputError{Msg: "no"}, &runs)
	tree.runGroup([]*pendingOp{b})
	if b.err == nil || b.committed || runs != 1 {
		t.Errorf("err %v, committed %v, runs %d; want the refusal, nothing committed, one run", b.err, b.committed, runs)
	}
	if r, e := taskState(t, tree, "b"); !reflect.DeepEqual(r, rec) || !reflect.DeepEqual(e, evs) {
		t.Errorf("the refused op's writes committed: %+v (was %+v)", r, rec)
	}
}

// A refusal before any write costs the others nothing: no rollback, no rerun.
func TestGroup_RefuseBeforeWritingFailsAlone(t *testing.T) {
	tree, tok := groupTree(t)
	var runsA, runsC int
	a := beatOp("a", tok["a"], nil, &runsA)
	refused := &pendingOp{op: "x", done: make(chan struct{}), lead: make(chan struct{}, 1),
		fn: func(journal.Tx, time.Time) ([]record.Event, error) { return nil, ErrNothingToClaim }}
	c := beatOp("c", tok["c"], nil, &runsC)
	tree.runGroup([]*pendingOp{a, refused, c})
	if !errors.Is(refused.err, ErrNothingToClaim) || refused.committed {
		t.Errorf("refused op: %v, committed %v", refused.err, refused.committed)
	}
	if runsA != 1 || runsC != 1 || a.err != nil || c.err != nil || !a.committed || !c.committed {
		t.Errorf("others: runs %d %d, errs %v %v, committed %v %v; want one run each, committed", runsA, runsC, a.err, c.err, a.committed, c.committed)
	}
}

// runThenFail is a store whose Update runs the function once (a run the
// store then throws away, as etcd does one that met a changed snapshot)
// and then fails before running it again.
type runThenFail struct {
	journal.Store
	err error
}

func (s runThenFail) Update(fn func(journal.Tx) error) error {
	_ = s.Store.View(fn)
	return s.err
}

// When the store fails, every op of the group answers the store's error,
// not what a thrown-away run of its function reported. Before, an op kept
// the outcome of the spoiled run: etcd's internal "the snapshot changed;
// run again" reached a complete's caller after a leader was killed.
func TestGroup_StoreFailureVoidsOutcomesOfEarlierRuns(t *testing.T) {
	tree, _ := groupTree(t)
	db, err := tree.open(false)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spoiled := errors.New("the snapshot changed; run again")
	storeDown := errors.New("etcd unreachable")
	op := &pendingOp{op: "x", done: make(chan struct{}), lead: make(chan struct{}, 1),
		fn: func(journal.Tx, time.Time) ([]record.Event, error) { return nil, spoiled }}
	if _, err := tree.commitGroup(runThenFail{db, storeDown}, []*pendingOp{op}); err != storeDown {
		t.Fatalf("commitGroup: %v, want the store's error", err)
	}
	if op.err != storeDown || op.committed {
		t.Errorf("op: err %v, committed %v; want the store's error", op.err, op.committed)
	}
}

// Together commits its calls' writes as one group, in the order of the
// calls: a completion and the next claim (run --loop) share one
// transaction, and the claim, coming second, takes the task that the
// completion unblocked.
func TestGroup_TogetherCommitsInOneGroupInOrder(t *testing.T) {
	tree := openGroupTree(t, 5*time.Second)
	ctx := context.Background()
	if _, err := tree.Add(ctx, AddRequest{ID: "first"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Add(ctx, AddRequest{ID: "second", After: []string{"first"}}); err != nil {
		t.Fatal(err)
	}
	c, err := tree.Claim(ctx, ClaimRequest{Agent: "a"})
	if err != nil || c.Task.ID != "first" {
		t.Fatalf("claim = %v, %v; want first", c.Task.ID, err)
	}
	for i := range 5 { // a group of one would pass now and then by chance: not five times
		var (
			next             ClaimResult
			doneErr, nextErr error
		)
		tree.Together(
			GroupCall{Ctx: ctx, Fn: func(ctx context.Context) {
				_, doneErr = tree.Complete(ctx, FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: "a"})
			}},
			GroupCall{Ctx: ctx, Fn: func(ctx context.Context) {
				next, nextErr = tree.Claim(ctx, ClaimRequest{Agent: "a"})
			}},
		)
		if doneErr != nil || nextErr != nil {
			t.Fatalf("complete %s: %v; claim next: %v", c.Task.ID, doneErr, nextErr)
		}
		_, doneEvs := taskState(t, tree, c.Task.ID)
		_, nextEvs := taskState(t, tree, next.Task.ID)
		done, claimed := doneEvs[len(doneEvs)-1], nextEvs[len(nextEvs)-1]
		if done.Type != record.EvComplete || claimed.Type != record.EvClaim {
			t.Fatalf("last events %s, %s; want complete, claim", done.Type, claimed.Type)
		}
		if !done.Time.Equal(claimed.Time) || claimed.Seq < done.Seq {
			t.Fatalf("complete (seq %d at %s) and claim (seq %d at %s) are not one group in that order", done.Seq, done.Time, claimed.Seq, claimed.Time)
		}
		if c.Task.ID == "first" && next.Task.ID != "second" {
			t.Fatalf("the claim alongside first's completion took %s, not second, which it unblocked", next.Task.ID)
		}
		if _, err := tree.Add(ctx, AddRequest{ID: fmt.Sprintf("more-%d", i)}); err != nil {
			t.Fatal(err)
		}
		c = next
	}
	// A call that returns without writing does not hold the group up.
	var err2 error
	tree.Together(
		GroupCall{Ctx: ctx, Fn: func(context.Context) {}},
		GroupCall{Ctx: ctx, Fn: func(ctx context.Context) {
			_, err2 = tree.Complete(ctx, FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: "a"})
		}},
	)
	if err2 != nil {
		t.Fatal(err2)
	}
}

// TestGroup_ClaimAfterAChangeInTheSameGroup: a claim that runs after an
// operation of its own group made a task ready (an add, a release) takes
// that task, although its file is still where it was before the group
// (staged, or in claimed/): the group's moves place it. Before, the claim
// looked for the file in available/ only: it skipped a released task and
// failed an added one as "file missing".
func TestGroup_ClaimAfterAChangeInTheSameGroup(t *testing.T) {
	tree := openGroupTree(t, 5*time.Second)
	ctx := context.Background()
	var next ClaimResult
	var addErr, nextErr error
	tree.Together(
		GroupCall{Ctx: ctx, Fn: func(ctx context.Context) { _, addErr = tree.Add(ctx, AddRequest{ID: "fresh"}) }},
		GroupCall{Ctx: ctx, Fn: func(ctx context.Context) { next, nextErr = tree.Claim(ctx, ClaimRequest{Agent: "a"}) }},
	)
	if addErr != nil || nextErr != nil || next.Task.ID != "fresh" {
		t.Fatalf("add: %v; claim in the same group: %v, %v; want fresh", addErr, next.Task.ID, nextErr)
	}
	if rec, _ := taskState(t, tree, "fresh"); rec.State != record.Claimed {
		t.Fatalf("fresh is %s after the group; want claimed", rec.State)
	}
	if _, err := os.Stat(filepath.Join(tree.Root(), "claimed", "fresh")); err != nil {
		t.Fatalf("the file of the task added and claimed in one group: %v", err)
	}
	var relErr error
	tree.Together(
		GroupCall{Ctx: ctx, Fn: func(ctx context.Context) {
			_, relErr = tree.Release(ctx, FencedRequest{ID: "fresh", Token: next.Token, Agent: "a"})
		}},
		GroupCall{Ctx: ctx, Fn: func(ctx context.Context) { next, nextErr = tree.Claim(ctx, ClaimRequest{Agent: "b"}) }},
	)
	if relErr != nil || nextErr != nil || next.Task.ID != "fresh" {
		t.Fatalf("release: %v; claim in the same group: %v, %v; want fresh", relErr, next.Task.ID, nextErr)
	}
	if _, err := os.Stat(filepath.Join(tree.Root(), "claimed", "fresh")); err != nil {
		t.Fatalf("the file of the task released and claimed again in one group: %v", err)
	}
	rep, err := tree.Replay(ctx, true)
	if err != nil || rep.Unfixed() != 0 {
		t.Fatalf("replay --check: %+v, %v", rep, err)
	}
}

// sharedBolt is the bbolt store as if its writers did not take turns (as
// on etcd), whose Head can be held up: what reconcile reads after a
// group's moves.
type sharedBolt struct {
	journal.Backend
	hold chan chan struct{} // while armed, Head sends a channel here and waits for it to close
}

func (b *sharedBolt) Open(dir string, o journal.OpenOptions) (journal.Store, error) {
	s, err := b.Backend.Open(dir, o)
	if err != nil {
		return nil, err
	}
	return &sharedHandle{Store: s, hold: b.hold}, nil
}

type sharedHandle struct {
	journal.Store
	hold chan chan struct{}
}

func (s *sharedHandle) Exclusive() bool    { return false }
func (s *sharedHandle) WritersHeld() bool  { return false }
func (s *sharedHandle) CommitHead() string { return "" }

func (s *sharedHandle) Head() (string, error) {
	release := make(chan struct{})
	select {
	case s.hold <- release:
		<-release
	default:
	}
	return s.Store.Head()
}

// Where writers do not take turns, a group's callers are answered once
// their changes are durable and their files moved, not after the check
// that no later commit raced those moves: that check (a read of the head
// over the network, on etcd) is the leader's, before the next group.
func TestGroup_AnsweredBeforeTheReconcileCheck(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	if _, err := Init(dir, record.Defaults{TTL: time.Hour, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	store, _, err := Options{}.backendFor(filepath.Join(dir, ".fence"))
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan chan struct{})
	tree, err := Open(dir, Options{Timeout: 5 * time.Second, Backend: &sharedBolt{Backend: store, hold: hold}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tree.Close() })
	ctx := context.Background()
	if _, err := tree.Add(ctx, AddRequest{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	c, err := tree.Claim(ctx, ClaimRequest{ID: "a", Agent: "agent", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	// A group of one heartbeat, led by another goroutine (a caller that
	// queued behind a leader waits on its op's done channel like this).
	var runs int
	beat := beatOp("a", c.Token, nil, &runs)
	led := make(chan struct{})
	go func() { defer close(led); tree.runGroup([]*pendingOp{beat}) }()
	var release chan struct{}
	select {
	case release = <-hold:
	case <-led:
		t.Fatal("the group ended without reading the head")
	}
	select {
	case <-beat.done:
		if beat.err != nil || !beat.committed {
			t.Errorf("heartbeat: err %v, committed %v", beat.err, beat.committed)
		}
	case <-time.After(30 * time.Second):
		t.Error("the heartbeat was not answered while its group's leader checked the head")
	}
	close(release)
	<-led
}

// A group of claims looks at .fence/live once: the first claim reaps the
// claim whose holder died, and the others, in the same transaction, see
// it reaped and do not reap it again. The next group looks again.
func TestGroup_ClaimsShareOneLivenessScan(t *testing.T) {
	tree, tokens := groupTree(t)
	ctx := context.Background()
	for _, id := range []string{"d", "e", "f", "g", "h"} {
		if _, err := tree.Add(ctx, AddRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// a's holder tied its claim to a process that is gone: its liveness
	// file is there, and nobody holds its lock.
	deadTie(t, tree.metaDir, tokens["a"])
	claims := func(n int) []ClaimResult {
		got := make([]ClaimResult, n)
		calls := make([]GroupCall, n)
		for i := range calls {
			calls[i] = GroupCall{Ctx: ctx, Fn: func(ctx context.Context) {
				c, err := tree.Claim(ctx, ClaimRequest{Agent: "batch"})
				if err != nil {
					t.Errorf("claim %d: %v", i, err)
				}
				got[i] = c
			}}
		}
		tree.Together(calls...)
		return got
	}
	before := tree.batch.holders.scans.Load()
	first := claims(3)
	if n := tree.batch.holders.scans.Load() - before; n != 1 {
		t.Errorf("a group of 3 claims scanned .fence/live %d times, want 1", n)
	}
	reaps := 0
	for _, c := range first {
		for _, r := range c.Reaped {
			if r.Task == "a" {
				reaps++
			}
		}
	}
	if rec, evs := taskState(t, tree, "a"); reaps != 1 || rec.State == record.Claimed && rec.Lease.Token == tokens["a"] {
		t.Errorf("a reaped %d times by the group (want 1); now %s, events %v", reaps, rec.State, evs)
	}
	claims(2)
	if n := tree.batch.holders.scans.Load() - before; n != 2 {
		t.Errorf("two groups scanned .fence/live %d times, want 2", n)
	}
}

// The claims one Tree ties to its process are links to one anchor, so a
// reaper tries one lock for all of them; while the Tree is open they are
// alive, and once it is closed (as when its process dies) every one is
// reaped as "holder died", and the next reap leaves .fence/live empty.
func TestLiveness_ClaimsOfATreeShareOneAnchor(t *testing.T) {
	tree, tokens := groupTree(t)
	ctx := context.Background()
	var keepers []*LeaseKeeper
	for _, id := range []string{"a", "b", "c"} {
		k, err := tree.NewKeeper(KeeperConfig{Task: id, Token: tokens[id], Agent: "agent-" + id, TTL: time.Minute, Deadline: time.Now().Add(time.Minute), TieToProcess: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Start(ctx); err != nil {
			t.Fatal(err)
		}
		keepers = append(keepers, k)
	}
	live := filepath.Join(tree.metaDir, liveDirName)
	entries, err := os.ReadDir(live)
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[uint64][]string{}
	for _, e := range entries {
		info, err := os.Lstat(filepath.Join(live, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		ino := info.Sys().(*syscall.Stat_t).Ino
		inodes[ino] = append(inodes[ino], e.Name())
	}
	if len(entries) != 4 || len(inodes) != 1 {
		t.Fatalf(".fence/live holds %v; want 3 claims' links and their anchor, one file", inodes)
	}

	other, err := Open(tree.Root(), Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Add(ctx, AddRequest{ID: "d"}); err != nil {
		t.Fatal(err)
	}
	c, err := other.Claim(ctx, ClaimRequest{Agent: "other"})
	if err != nil || c.Task.ID != "d" || len(c.Reaped) != 0 {
		t.Fatalf("claim while the holders live: %+v, %v; want d, nothing reaped", c, err)
	}

	// The holders' keepers end without untying (their process "dies"):
	// closing the Tree lets the anchor's lock go.
	for _, k := range keepers {
		k.mu.Lock()
		k.keepTie = true
		k.mu.Unlock()
		k.Stop()
	}
	tree.Close()
	if _, err := other.Add(ctx, AddRequest{ID: "e"}); err != nil {
		t.Fatal(err)
	}
	c, err = other.Claim(ctx, ClaimRequest{Agent: "other"})
	if err != nil {
		t.Fatal(err)
	}
	reaped := map[string]string{}
	for _, r := range c.Reaped {
		reaped[r.Task] = r.Reason
	}
	for _, id := range []string{"a", "b", "c"} {
		if reaped[id] != ReasonHolderDied {
			t.Errorf("%s after its Tree closed: reaped %q, want %q (all reaped: %v)", id, reaped[id], ReasonHolderDied, reaped)
		}
	}
	if _, err := other.Reap(ctx, false); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(live); len(left) != 0 {
		t.Errorf(".fence/live after the reap: %v, want empty", left)
	}
}

// TestGroup_TogetherWithAWriteToAnotherTree: a call of Together that
// writes to another Tree (the follow-up of a task, added to another tree)
// commits that write on its own; before, it took the write for the
// group's, the group's leader waited for a write that never came, and
// Together and every later write of the Tree hung for good (found from
// outside).
func TestGroup_TogetherWithAWriteToAnotherTree(t *testing.T) {
	open := func(name string) *Tree {
		dir := filepath.Join(t.TempDir(), name)
		if _, err := Init(dir, record.Defaults{TTL: time.Hour, MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
		tree, err := Open(dir, Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tree.Close() })
		return tree
	}
	a, b := open("a"), open("b")
	ctx := context.Background()
	if _, err := a.Add(ctx, AddRequest{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	c, err := a.Claim(ctx, ClaimRequest{Agent: "w"})
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	var doneErr, addErr error
	go func() {
		defer close(returned)
		a.Together(
			GroupCall{Ctx: ctx, Fn: func(ctx context.Context) {
				_, doneErr = a.Complete(ctx, FencedRequest{ID: "t1", Token: c.Token})
			}},
			GroupCall{Ctx: ctx, Fn: func(ctx context.Context) {
				_, addErr = b.Add(ctx, AddRequest{ID: "follow-up"})
			}},
		)
	}()
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("Together has not returned after 20s: a write to another tree was taken for the group's")
	}
	if doneErr != nil || addErr != nil {
		t.Fatalf("complete on a: %v; add on b: %v", doneErr, addErr)
	}
	if _, err := a.Add(ctx, AddRequest{ID: "t2"}); err != nil {
		t.Fatalf("a write after the group: %v", err)
	}
}

// TestGroup_StepPastItsContextIsNotMade: a step whose context ends while
// it waits for the writer's turn is not made when the turn comes: it
// returns its context's error and nothing changed (found from outside: a
// complete with a 300 ms deadline was made after 4.8 s and returned nil).
func TestGroup_StepPastItsContextIsNotMade(t *testing.T) {
	tree := openGroupTree(t, 10*time.Second)
	ctx := context.Background()
	if _, err := tree.Add(ctx, AddRequest{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	c, err := tree.Claim(ctx, ClaimRequest{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	// Another process holds the writer's turn for a second.
	other, err := Open(tree.Root(), Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	db, err := other.openWriter()
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(time.Second)
		db.Close()
		close(released)
	}()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = tree.Complete(short, FencedRequest{ID: "t1", Token: c.Token})
	<-released
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("complete whose deadline passed while it waited: %v, want context.DeadlineExceeded", err)
	}
	if rec, _ := taskState(t, tree, "t1"); rec.State != record.Claimed {
		t.Fatalf("t1 is %s: the step was made after its caller's deadline", rec.State)
	}
}

// openGroupTree makes a bbolt tree (an hour's TTL, 3 attempts) and opens
// it with the lock timeout given, closed when the test ends.
func openGroupTree(t *testing.T, timeout time.Duration) *Tree {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if _, err := Init(dir, record.Defaults{TTL: time.Hour, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	tree, err := Open(dir, Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tree.Close() })
	return tree
}
