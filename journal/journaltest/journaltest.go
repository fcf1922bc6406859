// Package journaltest is the contract of the storage port: the behaviour
// package fence relies on from every journal.Store and journal.Backend, as
// one test suite. Each backend's tests call Run with a function that makes
// a fresh, empty journal, and RunBackend with the backend itself (making
// and rebuilding journals); a new backend proves itself by passing both.
package journaltest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Defaults are the settings a store given to Run must have been created
// with.
var Defaults = record.Defaults{TTL: 10 * time.Minute, MaxAttempts: 3}

// T0 is the time the records of the suite carry. A store given to Run must
// have been created with its token counter at or below T0 in microseconds.
var T0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs the contract against the stores newStore makes: each call
// returns a new, empty journal created with Defaults, open for writing,
// that newStore closes at the test's cleanup.
func Run(t *testing.T, newStore func(t *testing.T) journal.Store) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, journal.Store)
	}{
		{"Defaults", testDefaults},
		{"TasksPutGet", testTasks},
		{"TasksFrom", testTasksFrom},
		{"TasksFromPages", testTasksFromPages},
		{"ReadyOrder", testReady},
		{"ExpiryOrder", testExpiry},
		{"DueIndex", testDue},
		{"Claims", testClaims},
		{"Requests", testRequests},
		{"Events", testEvents},
		{"LastCommit", testLastCommit},
		{"Tokens", testTokens},
		{"Writes", testWrites},
		{"Now", testNow},
		{"Reset", testReset},
		{"ErrorChangesNothing", testErrorChangesNothing},
		{"RerunStartsAfresh", testRerun},
		{"ReadSeesCommitted", testReadSeesCommitted},
		{"Head", testHead},
		{"DependentsIndex", testDependents},
		{"LabelIndex", testLabels},
		{"Fold", testFold},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

func update(t *testing.T, s journal.Store, fn func(journal.Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t *testing.T, s journal.Store, fn func(journal.Tx) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func available(id string, priority int64, seq uint64) record.Task {
	return record.Task{ID: id, State: record.Available, Priority: priority, MaxAttempts: 3, Seq: seq, Created: T0, Updated: T0}
}

func claimed(rec record.Task, token uint64, deadline time.Time) record.Task {
	rec.State = record.Claimed
	rec.Lease = &record.Lease{Token: token, Agent: "agent-" + rec.ID, ClaimedAt: T0, Deadline: deadline, TTL: time.Minute}
	return rec
}

// put stores recs as new tasks in one transaction.
func put(t *testing.T, s journal.Store, recs ...record.Task) {
	t.Helper()
	update(t, s, func(tx journal.Tx) error {
		for _, r := range recs {
			if err := tx.PutTask(nil, r); err != nil {
				return err
			}
		}
		return nil
	})
}

func readyIDs(t *testing.T, s journal.Store) (ids []string) {
	t.Helper()
	view(t, s, func(tx journal.Tx) error {
		ids = nil
		tx.Ready(func(id string) bool { ids = append(ids, id); return true })
		return nil
	})
	return ids
}

func testDefaults(t *testing.T, s journal.Store) {
	view(t, s, func(tx journal.Tx) error {
		d, err := tx.Defaults()
		if err != nil || d != Defaults {
			t.Errorf("Defaults = %+v, %v; want %+v", d, err, Defaults)
		}
		return nil
	})
}

func testTasks(t *testing.T, s journal.Store) {
	a, b := available("b", 0, 2), available("a", 0, 1)
	put(t, s, a, b)
	view(t, s, func(tx journal.Tx) error {
		got, ok, err := tx.Task("b")
		if err != nil || !ok || !reflect.DeepEqual(got, a) {
			t.Errorf("Task(b) = %+v, %v, %v; want %+v", got, ok, err, a)
		}
		if _, ok, err := tx.Task("nope"); ok || err != nil {
			t.Errorf("Task(nope) = ok %v, %v; want not found, no error", ok, err)
		}
		var ids []string
		if err := tx.ForEachTask(func(r record.Task) error { ids = append(ids, r.ID); return nil }); err != nil {
			return err
		}
		if !reflect.DeepEqual(ids, []string{"a", "b"}) {
			t.Errorf("ForEachTask order = %v; want [a b] (by id)", ids)
		}
		return nil
	})
	// Replace: b is claimed now; counts follow.
	b2 := claimed(a, 7, T0.Add(time.Minute))
	update(t, s, func(tx journal.Tx) error { return tx.PutTask(&a, b2) })
	view(t, s, func(tx journal.Tx) error {
		if got, _, _ := tx.Task("b"); !reflect.DeepEqual(got, b2) {
			t.Errorf("Task(b) after replace = %+v; want %+v", got, b2)
		}
		want := map[record.State]int{record.Waiting: 0, record.Available: 1, record.Claimed: 1, record.Done: 0, record.Failed: 0}
		if c := tx.Counts(); !reflect.DeepEqual(c, want) {
			t.Errorf("Counts = %v; want %v", c, want)
		}
		return nil
	})
}

// tasksFrom returns the ids TasksFrom(after) hands fn, stopping after n
// (0: all).
func tasksFrom(t *testing.T, tx journal.Tx, after string, n int) []string {
	t.Helper()
	var ids []string
	err := tx.TasksFrom(after, func(r record.Task) (bool, error) {
		ids = append(ids, r.ID)
		return n == 0 || len(ids) < n, nil
	})
	if err != nil {
		t.Errorf("TasksFrom(%q): %v", after, err)
	}
	return ids
}

// testTasksFrom: the paged scan of a listing starts strictly after the
// cursor (a known id or any string between two), goes in id order, stops
// when fn says so, hands on fn's error, sees the transaction's own
// writes, and returns the records as Task does.
func testTasksFrom(t *testing.T, s journal.Store) {
	recs := []record.Task{available("c", 0, 3), available("a", 1, 1), available("e", 0, 5), available("b", 0, 2), available("d", 0, 4)}
	recs[3] = claimed(recs[3], 7, T0.Add(time.Minute))
	put(t, s, recs...)
	view(t, s, func(tx journal.Tx) error {
		for _, c := range []struct {
			after string
			n     int
			want  []string
		}{
			{"", 0, []string{"a", "b", "c", "d", "e"}},  // the start
			{"b", 0, []string{"c", "d", "e"}},           // the middle: strictly after a known id
			{"b5", 0, []string{"c", "d", "e"}},          // between two ids
			{"0", 0, []string{"a", "b", "c", "d", "e"}}, // before the first
			{"e", 0, nil},               // the last id: nothing after it
			{"zz", 0, nil},              // past the end
			{"", 2, []string{"a", "b"}}, // fn stops the scan
			{"c", 1, []string{"d"}},
		} {
			if got := tasksFrom(t, tx, c.after, c.n); !reflect.DeepEqual(got, c.want) {
				t.Errorf("TasksFrom(%q), stopping after %d = %v; want %v", c.after, c.n, got, c.want)
			}
		}
		asTask(t, tx)
		// fn's error ends the scan and is returned.
		boom := errors.New("boom")
		calls := 0
		if err := tx.TasksFrom("", func(record.Task) (bool, error) { calls++; return true, boom }); !errors.Is(err, boom) || calls != 1 {
			t.Errorf("TasksFrom with fn failing: %v after %d calls; want boom after 1", err, calls)
		}
		return nil
	})
	// A store with a clock of its own judges a lease in the scan as Task
	// does: one that ran out reads back expired.
	if ex, ok := s.(LeaseExpirer); ok {
		if err := ex.ExpireLease("b"); err != nil {
			t.Fatal(err)
		}
		view(t, s, func(tx journal.Tx) error {
			if r := asTask(t, tx); r.Lease == nil || r.Lease.Deadline.After(tx.Now()) {
				t.Errorf("TasksFrom gave b with lease %+v after etcd expired it; want a deadline not after %v", r.Lease, tx.Now())
			}
			return nil
		})
	}
	// Inside a write transaction the scan sees what it wrote.
	update(t, s, func(tx journal.Tx) error {
		if err := tx.PutTask(nil, available("bb", 0, 6)); err != nil {
			return err
		}
		if got, want := tasksFrom(t, tx, "b", 2), []string{"bb", "c"}; !reflect.DeepEqual(got, want) {
			t.Errorf("TasksFrom(b) after PutTask(bb) in the same transaction = %v; want %v", got, want)
		}
		return nil
	})
}

// asTask checks that the first record after "a" (b, claimed) is what
// Task returns, and returns it.
func asTask(t *testing.T, tx journal.Tx) (got record.Task) {
	t.Helper()
	err := tx.TasksFrom("a", func(r record.Task) (bool, error) {
		got = r
		want, _, err := tx.Task(r.ID)
		if err != nil || !reflect.DeepEqual(r, want) {
			t.Errorf("TasksFrom gave %+v; Task(%s) = %+v, %v", r, r.ID, want, err)
		}
		return false, nil
	})
	if err != nil || got.ID != "b" {
		t.Errorf("TasksFrom(a) first gave %q, %v; want b", got.ID, err)
	}
	return got
}

// testTasksFromPages: a scan longer than any one page a store reads at a
// time (etcd's: 256 keys) goes on across pages, from any cursor.
func testTasksFromPages(t *testing.T, s journal.Store) {
	const n, batch = 600, 50 // batch: well inside etcd's 128 operations a transaction
	var all []string
	for i := 0; i < n; i += batch {
		var recs []record.Task
		for j := i; j < i+batch; j++ {
			id := fmt.Sprintf("t%04d", j)
			all = append(all, id)
			recs = append(recs, available(id, 0, uint64(j+1)))
		}
		put(t, s, recs...)
	}
	view(t, s, func(tx journal.Tx) error {
		if got := tasksFrom(t, tx, "", 0); !reflect.DeepEqual(got, all) {
			t.Errorf("TasksFrom(\"\") gave %d ids; want all %d in order", len(got), n)
		}
		if got := tasksFrom(t, tx, "t0099", 0); !reflect.DeepEqual(got, all[100:]) {
			t.Errorf("TasksFrom(t0099) gave %d ids from %v; want %d from t0100", len(got), got[:min(1, len(got))], n-100)
		}
		if got := tasksFrom(t, tx, "t0250", 300); !reflect.DeepEqual(got, all[251:551]) {
			t.Errorf("TasksFrom(t0250) stopping after 300 gave %d ids; want t0251..t0550", len(got))
		}
		return nil
	})
}

func testReady(t *testing.T, s journal.Store) {
	put(t, s, available("old-low", 0, 1), available("new-high", 5, 4), available("old-high", 5, 2),
		available("neg", -3, 3), available("new-low", 0, 5))
	want := []string{"old-high", "new-high", "old-low", "new-low", "neg"}
	if got := readyIDs(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("Ready = %v; want %v (priority descending, then oldest)", got, want)
	}
	// Claimed tasks leave the ready index.
	old := available("old-high", 5, 2)
	update(t, s, func(tx journal.Tx) error { return tx.PutTask(&old, claimed(old, 9, T0.Add(time.Minute))) })
	if got := readyIDs(t, s); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("Ready after a claim = %v; want %v", got, want[1:])
	}
	view(t, s, func(tx journal.Tx) error {
		var first []string
		tx.Ready(func(id string) bool { first = append(first, id); return false })
		if len(first) != 1 {
			t.Errorf("Ready went on after fn returned false: %v", first)
		}
		if r, e := tx.IndexSizes(); r != 4 || e != 1 {
			t.Errorf("IndexSizes = %d, %d; want 4, 1", r, e)
		}
		return nil
	})
}

// testDue: the due index holds the waiting tasks that wait for a time
// only, earliest first, reads only as far as asked, follows a task that
// is rescheduled or leaves waiting, and counts waiting tasks.
func testDue(t *testing.T, s journal.Store) {
	waiting := func(id string, seq uint64, at time.Time, after ...string) record.Task {
		r := available(id, 0, seq)
		r.State, r.NotBefore, r.After = record.Waiting, at, after
		return r
	}
	late := waiting("late", 1, T0.Add(3*time.Minute))
	early := waiting("early", 2, T0.Add(time.Minute))
	tie := waiting("tie", 3, T0.Add(time.Minute)) // same time: by seq
	blocked := waiting("blocked", 4, T0.Add(time.Second), "early")
	put(t, s, late, early, tie, blocked, available("free", 0, 5))
	scheduled := func(tx journal.Tx, limit int) (ids []string, ats []time.Time) {
		err := tx.Scheduled(func(id string, at time.Time) bool {
			ids, ats = append(ids, id), append(ats, at)
			return len(ids) < limit
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids, ats
	}
	view(t, s, func(tx journal.Tx) error {
		ids, ats := scheduled(tx, 10)
		if !reflect.DeepEqual(ids, []string{"early", "tie", "late"}) {
			t.Errorf("Scheduled = %v; want [early tie late] (earliest first, then oldest; a blocked task is not there)", ids)
		}
		if len(ats) == 3 && (!ats[0].Equal(T0.Add(time.Minute)) || !ats[2].Equal(T0.Add(3*time.Minute))) {
			t.Errorf("Scheduled times = %v; want the tasks' NotBefore", ats)
		}
		if ids, _ := scheduled(tx, 1); len(ids) != 1 {
			t.Errorf("Scheduled went on after fn returned false: %v", ids)
		}
		if c := tx.Counts(); c[record.Waiting] != 4 || c[record.Available] != 1 {
			t.Errorf("Counts = %v; want 4 waiting, 1 available", c)
		}
		return nil
	})
	// Rescheduled, made available, cancelled: the index follows.
	later := early
	later.NotBefore = T0.Add(time.Hour)
	due := tie
	due.State, due.NotBefore = record.Available, time.Time{}
	gone := late
	gone.State = record.Failed
	update(t, s, func(tx journal.Tx) error {
		for _, p := range [][2]record.Task{{early, later}, {tie, due}, {late, gone}} {
			if err := tx.PutTask(&p[0], p[1]); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, s, func(tx journal.Tx) error {
		if ids, _ := scheduled(tx, 10); !reflect.DeepEqual(ids, []string{"early"}) {
			t.Errorf("Scheduled after the changes = %v; want [early]", ids)
		}
		if c := tx.Counts(); c[record.Waiting] != 2 || c[record.Available] != 2 || c[record.Failed] != 1 {
			t.Errorf("Counts = %v; want 2 waiting, 2 available, 1 failed", c)
		}
		return nil
	})
}

// LeaseExpirer is a store that judges lease expiry by a clock of its own
// (etcd's), not by the deadlines the hosts wrote: the suite runs a lease
// out through it.
type LeaseExpirer interface {
	ExpireLease(id string) error
}

func testExpiry(t *testing.T, s journal.Store) {
	if ex, ok := s.(LeaseExpirer); ok {
		testExpiryOwnClock(t, s, ex)
		return
	}
	late := claimed(available("late", 0, 1), 1, T0.Add(3*time.Minute))
	early := claimed(available("early", 0, 2), 2, T0.Add(time.Minute))
	mid := claimed(available("mid", 0, 3), 3, T0.Add(2*time.Minute))
	put(t, s, late, early, mid, available("free", 0, 4))
	view(t, s, func(tx journal.Tx) error {
		if got := tx.Expired(T0); len(got) != 0 {
			t.Errorf("Expired(T0) = %v; want none", got)
		}
		if got := tx.Expired(T0.Add(2 * time.Minute)); !reflect.DeepEqual(got, []string{"early", "mid"}) {
			t.Errorf("Expired(T0+2m) = %v; want [early mid] (deadline at or before now, oldest first)", got)
		}
		var all []string
		if err := tx.Leases(func(id string) error { all = append(all, id); return nil }); err != nil {
			return err
		}
		if !reflect.DeepEqual(all, []string{"early", "mid", "late"}) {
			t.Errorf("Leases = %v; want deadline order", all)
		}
		return nil
	})
	// A lease extended moves in the index; a task done leaves it.
	ext := early
	ext.Lease = &record.Lease{Token: 2, Agent: "x", ClaimedAt: T0, Deadline: T0.Add(time.Hour)}
	done := mid
	done.State, done.Lease = record.Done, nil
	update(t, s, func(tx journal.Tx) error {
		if err := tx.PutTask(&early, ext); err != nil {
			return err
		}
		return tx.PutTask(&mid, done)
	})
	view(t, s, func(tx journal.Tx) error {
		if got := tx.Expired(T0.Add(10 * time.Minute)); !reflect.DeepEqual(got, []string{"late"}) {
			t.Errorf("Expired after extend and done = %v; want [late]", got)
		}
		return nil
	})
}

// testExpiryOwnClock: the store's clock, not the deadlines in the records,
// says which lease has run out; the expired ones come oldest deadline
// first and read back with a deadline that is not after Now.
func testExpiryOwnClock(t *testing.T, s journal.Store, ex LeaseExpirer) {
	late := claimed(available("late", 0, 1), 1, T0.Add(3*time.Minute))
	early := claimed(available("early", 0, 2), 2, T0.Add(time.Minute))
	mid := claimed(available("mid", 0, 3), 3, T0.Add(2*time.Minute))
	put(t, s, late, early, mid, available("free", 0, 4))
	expired := func(want ...string) {
		t.Helper()
		view(t, s, func(tx journal.Tx) error {
			// Far past every recorded deadline: a host whose clock is ahead.
			if got := tx.Expired(T0.Add(time.Hour)); !reflect.DeepEqual(got, want) && len(got)+len(want) > 0 {
				t.Errorf("Expired = %v; want %v (the store's clock decides, oldest deadline first)", got, want)
			}
			for _, id := range []string{"early", "mid", "late"} {
				rec, _, err := tx.Task(id)
				if err != nil || rec.Lease == nil {
					continue
				}
				if dead := !rec.Lease.Deadline.After(tx.Now()); dead != slices.Contains(want, id) {
					t.Errorf("task %s reads back with deadline %v, now %v: expired = %v; want %v", id, rec.Lease.Deadline, tx.Now(), dead, !dead)
				}
			}
			return nil
		})
	}
	expired()
	for _, id := range []string{"mid", "early"} {
		if err := ex.ExpireLease(id); err != nil {
			t.Fatal(err)
		}
	}
	expired("early", "mid")
	view(t, s, func(tx journal.Tx) error {
		var all []string
		if err := tx.Leases(func(id string) error { all = append(all, id); return nil }); err != nil {
			return err
		}
		if !reflect.DeepEqual(all, []string{"early", "mid", "late"}) {
			t.Errorf("Leases = %v; want deadline order", all)
		}
		return nil
	})
	// A new lease on an expired task lives again; a task done leaves the
	// index.
	ext := early
	ext.Lease = &record.Lease{Token: 5, Agent: "x", ClaimedAt: T0, Deadline: T0.Add(time.Hour), TTL: time.Hour}
	done := mid
	done.State, done.Lease = record.Done, nil
	update(t, s, func(tx journal.Tx) error {
		if err := tx.PutTask(&early, ext); err != nil {
			return err
		}
		return tx.PutTask(&mid, done)
	})
	expired()
	if err := ex.ExpireLease("late"); err != nil {
		t.Fatal(err)
	}
	expired("late")
}

func testClaims(t *testing.T, s journal.Store) {
	c2 := record.Claim{Token: 20, Task: "t", Agent: "a", At: T0, RequestID: "r"}
	c1 := record.Claim{Token: 10, Task: "u", Agent: "b", At: T0,
		Ended: &record.LeaseEnd{Token: 10, Agent: "b", At: T0.Add(time.Second), By: record.EvReap, Reason: "lease expired"}}
	update(t, s, func(tx journal.Tx) error {
		if err := tx.PutClaim(c2); err != nil {
			return err
		}
		return tx.PutClaim(c1)
	})
	view(t, s, func(tx journal.Tx) error {
		if got, ok, err := tx.Claim(10); err != nil || !ok || !reflect.DeepEqual(got, c1) {
			t.Errorf("Claim(10) = %+v, %v, %v; want %+v", got, ok, err, c1)
		}
		if _, ok, err := tx.Claim(11); ok || err != nil {
			t.Errorf("Claim(11) = ok %v, %v; want not found", ok, err)
		}
		var toks []uint64
		if err := tx.ForEachClaim(func(c record.Claim) error { toks = append(toks, c.Token); return nil }); err != nil {
			return err
		}
		if !reflect.DeepEqual(toks, []uint64{10, 20}) {
			t.Errorf("ForEachClaim = %v; want token order", toks)
		}
		return nil
	})
}

func testRequests(t *testing.T, s journal.Store) {
	view(t, s, func(tx journal.Tx) error {
		if _, ok := tx.Request("a", "r1"); ok {
			t.Errorf("Request in an empty journal found")
		}
		return nil
	})
	update(t, s, func(tx journal.Tx) error {
		if err := tx.PutRequest("a", "r1", 5); err != nil {
			return err
		}
		return tx.PutRequest("b", "r1", 6)
	})
	view(t, s, func(tx journal.Tx) error {
		if tok, ok := tx.Request("a", "r1"); !ok || tok != 5 {
			t.Errorf("Request(a, r1) = %d, %v; want 5", tok, ok)
		}
		if tok, ok := tx.Request("b", "r1"); !ok || tok != 6 {
			t.Errorf("Request(b, r1) = %d, %v; want 6 (scoped by agent)", tok, ok)
		}
		return nil
	})
	update(t, s, func(tx journal.Tx) error { return tx.DeleteRequest("a", "r1") })
	view(t, s, func(tx journal.Tx) error {
		if _, ok := tx.Request("a", "r1"); ok {
			t.Errorf("Request(a, r1) after DeleteRequest found")
		}
		if _, ok := tx.Request("b", "r1"); !ok {
			t.Errorf("DeleteRequest(a, r1) removed b's")
		}
		return nil
	})
}

func appendEvents(t *testing.T, s journal.Store, ids ...string) (out []record.Event) {
	t.Helper()
	update(t, s, func(tx journal.Tx) error {
		out = nil
		for _, id := range ids {
			ev, err := tx.Append(record.Event{Seq: 999, Time: T0, Type: record.EvAdd, Task: id, To: record.Available})
			if err != nil {
				return err
			}
			out = append(out, ev)
		}
		return nil
	})
	return out
}

func seqs(evs []record.Event) []uint64 {
	var out []uint64
	for _, ev := range evs {
		out = append(out, ev.Seq)
	}
	return out
}

func testEvents(t *testing.T, s journal.Store) {
	first := appendEvents(t, s, "a", "b")
	if got := seqs(first); !reflect.DeepEqual(got, []uint64{1, 2}) {
		t.Fatalf("Append seqs = %v; want [1 2] (the caller's Seq ignored)", got)
	}
	appendEvents(t, s, "a", "c", "a")
	view(t, s, func(tx journal.Tx) error {
		var fwd, back, ofA []record.Event
		collect := func(to *[]record.Event) func(record.Event) (bool, error) {
			return func(ev record.Event) (bool, error) { *to = append(*to, ev); return true, nil }
		}
		if err := tx.Events(2, collect(&fwd)); err != nil {
			return err
		}
		if err := tx.EventsBackward(collect(&back)); err != nil {
			return err
		}
		if err := tx.TaskEventsBackward("a", collect(&ofA)); err != nil {
			return err
		}
		if got := seqs(fwd); !reflect.DeepEqual(got, []uint64{2, 3, 4, 5}) {
			t.Errorf("Events(2) = %v; want [2 3 4 5]", got)
		}
		if got := seqs(back); !reflect.DeepEqual(got, []uint64{5, 4, 3, 2, 1}) {
			t.Errorf("EventsBackward = %v; want [5 4 3 2 1]", got)
		}
		if got := seqs(ofA); !reflect.DeepEqual(got, []uint64{5, 3, 1}) {
			t.Errorf("TaskEventsBackward(a) = %v; want [5 3 1]", got)
		}
		var two []record.Event
		if err := tx.Events(1, func(ev record.Event) (bool, error) { two = append(two, ev); return len(two) < 2, nil }); err != nil {
			return err
		}
		if len(two) != 2 {
			t.Errorf("Events went on after fn returned false: %d events", len(two))
		}
		if ev := fwd[0]; ev.Task != "b" || ev.Type != record.EvAdd || !ev.Time.Equal(T0) {
			t.Errorf("event 2 = %+v; want b's add at T0", ev)
		}
		stop := errors.New("stop")
		if err := tx.EventsBackward(func(record.Event) (bool, error) { return true, stop }); !errors.Is(err, stop) {
			t.Errorf("EventsBackward did not return fn's error: %v", err)
		}
		return nil
	})
}

func testLastCommit(t *testing.T, s journal.Store) {
	view(t, s, func(tx journal.Tx) error {
		if evs, err := tx.LastCommit(); err != nil || len(evs) != 0 {
			t.Errorf("LastCommit of an empty journal = %v, %v", evs, err)
		}
		return nil
	})
	appendEvents(t, s, "a")
	appendEvents(t, s, "b", "c")
	// A commit that appends no event leaves LastCommit alone.
	put(t, s, available("x", 0, 9))
	view(t, s, func(tx journal.Tx) error {
		evs, err := tx.LastCommit()
		if got := seqs(evs); err != nil || !reflect.DeepEqual(got, []uint64{2, 3}) {
			t.Errorf("LastCommit = %v, %v; want [2 3]", got, err)
		}
		return nil
	})
}

func testTokens(t *testing.T, s journal.Store) {
	var toks []uint64
	update(t, s, func(tx journal.Tx) error {
		toks = nil
		for _, now := range []time.Time{T0, T0, T0.Add(-time.Hour), T0.Add(time.Second)} {
			tok, err := tx.NextToken(now)
			if err != nil {
				return err
			}
			toks = append(toks, tok)
		}
		return nil
	})
	for i, tok := range toks {
		if i > 0 && tok <= toks[i-1] {
			t.Errorf("tokens not increasing: %v", toks)
		}
	}
	if toks[0] < uint64(T0.UnixMicro()) {
		t.Errorf("token %d below the clock in µs (%d)", toks[0], T0.UnixMicro())
	}
	if toks[3] < uint64(T0.Add(time.Second).UnixMicro()) {
		t.Errorf("token %d below its clock in µs", toks[3])
	}
	last := toks[len(toks)-1]
	view(t, s, func(tx journal.Tx) error {
		if tx.LastToken() != last {
			t.Errorf("LastToken = %d; want %d", tx.LastToken(), last)
		}
		if tx.Ceiling() <= last {
			t.Errorf("Ceiling %d not above the last token %d", tx.Ceiling(), last)
		}
		return nil
	})
	// RaiseCounter never lowers; a raise past the ceiling moves it too.
	high := last + 2*journal.CeilingStep
	update(t, s, func(tx journal.Tx) error {
		if err := tx.RaiseCounter(last - 5); err != nil {
			return err
		}
		return tx.RaiseCounter(high)
	})
	update(t, s, func(tx journal.Tx) error {
		// At least: a store may go higher when its ceiling says tokens up
		// to there may have gone out (a raise whose commit was lost).
		if tx.LastToken() < high {
			t.Errorf("LastToken after RaiseCounter = %d; want at least %d", tx.LastToken(), high)
		}
		if tx.Ceiling() < high {
			t.Errorf("Ceiling %d below the raised counter %d", tx.Ceiling(), high)
		}
		tok, err := tx.NextToken(T0)
		if err == nil && tok <= high {
			t.Errorf("NextToken after RaiseCounter(%d) = %d", high, tok)
		}
		return err
	})
}

func testWrites(t *testing.T, s journal.Store) {
	update(t, s, func(tx journal.Tx) error {
		n := tx.Writes()
		tx.Task("a")
		tx.Counts()
		tx.LastToken()
		if tx.Writes() != n {
			t.Errorf("reads changed Writes: %d → %d", n, tx.Writes())
		}
		if err := tx.PutTask(nil, available("a", 0, 1)); err != nil {
			return err
		}
		if tx.Writes() <= n {
			t.Errorf("PutTask did not count in Writes")
		}
		n = tx.Writes()
		if _, err := tx.Append(record.Event{Time: T0, Type: record.EvAdd, Task: "a", To: record.Available}); err != nil {
			return err
		}
		if tx.Writes() <= n {
			t.Errorf("Append did not count in Writes")
		}
		n = tx.Writes()
		if _, err := tx.NextToken(T0); err != nil {
			return err
		}
		if tx.Writes() <= n {
			t.Errorf("NextToken did not count in Writes")
		}
		return nil
	})
}

func testNow(t *testing.T, s journal.Store) {
	view(t, s, func(tx journal.Tx) error {
		a := tx.Now()
		time.Sleep(time.Millisecond) // the store's clock moves on; the transaction's does not
		if a.IsZero() || !tx.Now().Equal(a) {
			t.Errorf("Now = %v then %v; want one non-zero time per transaction", a, tx.Now())
		}
		return nil
	})
}

func testReset(t *testing.T, s journal.Store) {
	rec := claimed(available("a", 0, 1), 0, T0.Add(time.Minute))
	var tok uint64
	update(t, s, func(tx journal.Tx) (err error) {
		if _, err := tx.Append(record.Event{Time: T0, Type: record.EvAdd, Task: "a", To: record.Available}); err != nil {
			return err
		}
		if tok, err = tx.NextToken(T0); err != nil {
			return err
		}
		rec.Lease.Token = tok
		if err := tx.PutTask(nil, rec); err != nil {
			return err
		}
		if err := tx.PutTask(nil, available("b", 0, 2)); err != nil {
			return err
		}
		if err := tx.PutClaim(record.Claim{Token: tok, Task: "a", Agent: "x", At: T0, RequestID: "r"}); err != nil {
			return err
		}
		return tx.PutRequest("x", "r", tok)
	})
	update(t, s, func(tx journal.Tx) error { return tx.Reset() })
	view(t, s, func(tx journal.Tx) error {
		if _, ok, _ := tx.Task("a"); ok {
			t.Errorf("task kept by Reset")
		}
		if _, ok, _ := tx.Claim(tok); ok {
			t.Errorf("claim kept by Reset")
		}
		if _, ok := tx.Request("x", "r"); ok {
			t.Errorf("request kept by Reset")
		}
		if r, e := tx.IndexSizes(); r != 0 || e != 0 {
			t.Errorf("IndexSizes after Reset = %d, %d", r, e)
		}
		for st, n := range tx.Counts() {
			if n != 0 {
				t.Errorf("Counts[%s] = %d after Reset", st, n)
			}
		}
		if tx.LastToken() != tok {
			t.Errorf("LastToken after Reset = %d; want %d (kept)", tx.LastToken(), tok)
		}
		n := 0
		if err := tx.Events(1, func(record.Event) (bool, error) { n++; return true, nil }); err != nil || n != 1 {
			t.Errorf("events after Reset: %d, %v; want the 1 kept", n, err)
		}
		return nil
	})
	put(t, s, available("c", 0, 3))
	if got := readyIDs(t, s); !reflect.DeepEqual(got, []string{"c"}) {
		t.Errorf("Ready after Reset and a put = %v; want [c]", got)
	}
}

// snapshot is what a transaction sees of the journal at its start.
type snapshot struct {
	task     bool
	token    uint64
	events   int
	counts   map[record.State]int
	request  bool
	claim    bool
	lastSeqs []uint64
}

func snap(tx journal.Tx) snapshot {
	s := snapshot{token: tx.LastToken(), counts: tx.Counts()}
	_, s.task, _ = tx.Task("t")
	_, s.claim, _ = tx.Claim(s.token + 1)
	_, s.request = tx.Request("a", "r")
	tx.Events(1, func(record.Event) (bool, error) { s.events++; return true, nil })
	evs, _ := tx.LastCommit()
	s.lastSeqs = seqs(evs)
	return s
}

// write makes every kind of change: a task, an event, a token, a claim and
// a request.
func write(tx journal.Tx) error {
	if _, err := tx.Append(record.Event{Time: T0, Type: record.EvClaim, Task: "t", To: record.Claimed}); err != nil {
		return err
	}
	tok, err := tx.NextToken(T0)
	if err != nil {
		return err
	}
	if err := tx.PutTask(nil, claimed(available("t", 0, 1), tok, T0.Add(time.Minute))); err != nil {
		return err
	}
	if err := tx.PutClaim(record.Claim{Token: tok, Task: "t", Agent: "a", At: T0, RequestID: "r"}); err != nil {
		return err
	}
	return tx.PutRequest("a", "r", tok)
}

func testErrorChangesNothing(t *testing.T, s journal.Store) {
	appendEvents(t, s, "before")
	var before snapshot
	view(t, s, func(tx journal.Tx) error { before = snap(tx); return nil })
	boom := errors.New("boom")
	err := s.Update(func(tx journal.Tx) error {
		if err := write(tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v; want fn's error", err)
	}
	view(t, s, func(tx journal.Tx) error {
		if after := snap(tx); !reflect.DeepEqual(after, before) {
			t.Errorf("a failed Update changed the journal:\nbefore %+v\nafter  %+v", before, after)
		}
		return nil
	})
}

// A store may run an Update's function more than once; every run must find
// the journal as it was before the Update, whatever an earlier run (or an
// earlier failed Update) wrote, and the commit holds one run's writes.
func testRerun(t *testing.T, s journal.Store) {
	var before snapshot
	view(t, s, func(tx journal.Tx) error { before = snap(tx); return nil })
	boom := errors.New("boom")
	if err := s.Update(func(tx journal.Tx) error { write(tx); return boom }); !errors.Is(err, boom) {
		t.Fatalf("Update returned %v; want fn's error", err)
	}
	runs := 0
	update(t, s, func(tx journal.Tx) error {
		runs++
		if got := snap(tx); !reflect.DeepEqual(got, before) {
			t.Errorf("run %d started from %+v; want the state before any attempt %+v", runs, got, before)
		}
		if tx.Writes() != 0 {
			t.Errorf("run %d started with Writes %d", runs, tx.Writes())
		}
		return write(tx)
	})
	view(t, s, func(tx journal.Tx) error {
		n := 0
		tx.Events(1, func(record.Event) (bool, error) { n++; return true, nil })
		if n != before.events+1 {
			t.Errorf("%d events after %d run(s) of one Update; want %d", n, runs, before.events+1)
		}
		if c := tx.Counts()[record.Claimed]; c != 1 {
			t.Errorf("Counts[claimed] = %d; want 1", c)
		}
		return nil
	})
}

func testReadSeesCommitted(t *testing.T, s journal.Store) {
	put(t, s, available("a", 0, 1))
	view(t, s, func(tx journal.Tx) error {
		if _, ok, err := tx.Task("a"); !ok || err != nil {
			t.Errorf("a committed task is not seen: %v, %v", ok, err)
		}
		return nil
	})
	put(t, s, available("b", 0, 2))
	if got := readyIDs(t, s); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("Ready = %v; want [a b]", got)
	}
}

func testHead(t *testing.T, s journal.Store) {
	head := func() string {
		t.Helper()
		h, err := s.Head()
		if err != nil {
			t.Fatalf("Head: %v", err)
		}
		return h
	}
	h0 := head()
	view(t, s, func(journal.Tx) error { return nil })
	if h := head(); h != h0 {
		t.Errorf("a read changed Head: %q → %q", h0, h)
	}
	appendEvents(t, s, "a")
	h1 := head()
	if h1 == h0 {
		t.Errorf("Head unchanged by a commit: %q", h1)
	}
	put(t, s, available("b", 0, 2)) // a commit without events is a commit too
	if h := head(); h == h1 {
		t.Errorf("Head unchanged by a commit without events: %q", h)
	}
}

func dependents(t *testing.T, s journal.Store, dep string) (ids []string, blocked int) {
	t.Helper()
	view(t, s, func(tx journal.Tx) error {
		ids, blocked = nil, tx.Blocked()
		return tx.Dependents(dep, func(id string) bool { ids = append(ids, id); return true })
	})
	return ids, blocked
}

// testDependents: a task with After is blocked (counted, not ready) and
// listed under each of its dependencies; PutTask moves the entries as
// After changes, in the same transaction, and Reset clears them.
func testDependents(t *testing.T, s journal.Store) {
	x, y := available("x", 0, 1), available("y", 0, 2)
	d := available("d", 5, 3)
	d.After = []string{"x", "y"}
	e := available("e", 0, 4)
	e.After = []string{"x"}
	xy := available("xy", 0, 5) // a dependency whose id starts with another's
	put(t, s, x, y, d, e, xy)
	if ids, n := dependents(t, s, "x"); !reflect.DeepEqual(ids, []string{"d", "e"}) || n != 2 {
		t.Errorf("Dependents(x) = %v, Blocked = %d; want [d e], 2", ids, n)
	}
	if got := readyIDs(t, s); !reflect.DeepEqual(got, []string{"x", "y", "xy"}) {
		t.Errorf("Ready = %v; want [x y xy]: blocked tasks are not ready", got)
	}
	// x is done: d waits for y alone, e for nothing (ready now).
	d2, e2 := d, e
	d2.After, e2.After = []string{"y"}, nil
	update(t, s, func(tx journal.Tx) error {
		if err := tx.PutTask(&d, d2); err != nil {
			return err
		}
		return tx.PutTask(&e, e2)
	})
	if ids, n := dependents(t, s, "x"); len(ids) != 0 || n != 1 {
		t.Errorf("Dependents(x) after = %v, Blocked = %d; want none, 1", ids, n)
	}
	if ids, _ := dependents(t, s, "y"); !reflect.DeepEqual(ids, []string{"d"}) {
		t.Errorf("Dependents(y) = %v; want [d]", ids)
	}
	if got := readyIDs(t, s); !reflect.DeepEqual(got, []string{"x", "y", "e", "xy"}) {
		t.Errorf("Ready = %v; want [x y e xy]", got)
	}
	var all [][2]string
	view(t, s, func(tx journal.Tx) error {
		all = nil
		return tx.Dependencies(func(dep, id string) bool { all = append(all, [2]string{dep, id}); return true })
	})
	if !reflect.DeepEqual(all, [][2]string{{"y", "d"}}) {
		t.Errorf("Dependencies = %v; want [[y d]]", all)
	}
	update(t, s, func(tx journal.Tx) error { return tx.Reset() })
	if ids, n := dependents(t, s, "y"); len(ids) != 0 || n != 0 {
		t.Errorf("after Reset: Dependents(y) = %v, Blocked = %d", ids, n)
	}
}

func labelled(t *testing.T, s journal.Store, label string) (ids []string) {
	t.Helper()
	view(t, s, func(tx journal.Tx) error {
		ids = nil
		tx.ReadyLabel(label, func(id string) bool { ids = append(ids, id); return true })
		return nil
	})
	return ids
}

// testLabels: the per-label ready index holds the ready tasks of a label
// in claim order, and only them: a blocked or claimed task leaves it.
func testLabels(t *testing.T, s journal.Store) {
	a, b, c := available("a", 0, 1), available("b", 9, 2), available("c", 0, 3)
	a.Labels, b.Labels, c.Labels = []string{"gpu", "linux"}, []string{"gpu"}, []string{"gp"}
	blocked := available("blk", 0, 4)
	blocked.Labels, blocked.After = []string{"gpu"}, []string{"a"}
	put(t, s, a, b, c, blocked)
	if got := labelled(t, s, "gpu"); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("ReadyLabel(gpu) = %v; want [b a] (priority, then age; not the blocked one)", got)
	}
	if got := labelled(t, s, "gp"); !reflect.DeepEqual(got, []string{"c"}) {
		t.Errorf("ReadyLabel(gp) = %v; want [c]", got)
	}
	b2 := claimed(b, 7, T0.Add(time.Minute))
	update(t, s, func(tx journal.Tx) error { return tx.PutTask(&b, b2) })
	if got := labelled(t, s, "gpu"); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("ReadyLabel(gpu) after claiming b = %v; want [a]", got)
	}
	if got := labelled(t, s, "none"); len(got) != 0 {
		t.Errorf("ReadyLabel(none) = %v", got)
	}
}
