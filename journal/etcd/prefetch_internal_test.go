package etcd

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// putTasks stores n tasks t00…, every other one claimed (so with a
// liveness key), and makes t00 a dependency of t01.
func putTasks(t *testing.T, s journal.Store, n int) {
	t.Helper()
	now := time.Now()
	err := s.Update(func(tx journal.Tx) error {
		for i := range n {
			rec := record.Task{ID: fmt.Sprintf("t%02d", i), State: record.Available, MaxAttempts: 3, Seq: uint64(i + 1), Created: now, Updated: now}
			if i%2 == 0 {
				rec.State = record.Claimed
				rec.Lease = &record.Lease{Token: uint64(i + 1), Agent: "a", ClaimedAt: now, Deadline: now.Add(time.Hour), TTL: time.Hour}
			}
			if i == 1 {
				rec.After = []string{"t00"}
			}
			if err := tx.PutTask(nil, rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPrefetch_OneRequestForTheGroup: what the operations of a group read
// first (their tasks' records and liveness keys, the dependents of each)
// comes with the request that begins the transaction, and the first ready
// candidates of its claims in one more: not one or two requests per
// operation; and it reads back the same as reading on demand.
func TestPrefetch_OneRequestForTheGroup(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	putTasks(t, s, 40)
	ids := []string{"t00", "t02", "t04", "t06", "t08", "t10", "t12", "t14"}

	type seen struct {
		tasks []record.Task
		deps  [][]string
		ready []record.Task
	}
	read := func(tx *Tx) (out seen) {
		for _, id := range ids {
			rec, ok, err := tx.Task(id)
			if err != nil || !ok {
				t.Fatalf("Task(%s) = %v, %v", id, ok, err)
			}
			out.tasks = append(out.tasks, rec)
			var d []string
			if err := tx.Dependents(id, func(dep string) bool { d = append(d, dep); return true }); err != nil {
				t.Fatal(err)
			}
			out.deps = append(out.deps, d)
		}
		tx.Ready(func(id string) bool {
			rec, _, err := tx.Task(id)
			if err != nil {
				t.Fatal(err)
			}
			out.ready = append(out.ready, rec)
			return len(out.ready) < 10
		})
		return out
	}

	var onDemand, ahead seen
	var demandRequests, aheadRequests int
	for _, prefetch := range []bool{false, true} {
		_, fresh := open(t, cfg, dir) // a new handle: nothing cached
		update := fresh.Update
		if prefetch {
			update = func(fn func(journal.Tx) error) error { return fresh.(journal.Prefetcher).UpdateReading(ids, true, fn) }
		}
		err := update(func(jt journal.Tx) error {
			tx := jt.(*Tx)
			before := tx.requests
			if prefetch {
				// begin and the ids' keys in one request, the ready
				// candidates (known only from begin's answer) in one more
				if before != 2 {
					t.Errorf("beginning with the read ahead of %d ids and the ready candidates took %d requests; want 2", len(ids), before)
				}
				ahead = read(tx)
				aheadRequests = tx.requests - before
			} else {
				tx.Counts() // begin: the snapshot's own request
				before = tx.requests
				onDemand = read(tx)
				demandRequests = tx.requests - before
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Without claims, the ids' keys come with begin: one request in all.
	_, fresh := open(t, cfg, dir)
	err := fresh.(journal.Prefetcher).UpdateReading(ids, false, func(jt journal.Tx) error {
		tx := jt.(*Tx)
		if tx.requests != 1 {
			t.Errorf("beginning with the read ahead of %d ids took %d requests; want 1", len(ids), tx.requests)
		}
		for _, id := range ids {
			if _, _, err := tx.Task(id); err != nil {
				return err
			}
			if err := tx.Dependents(id, func(string) bool { return true }); err != nil {
				return err
			}
		}
		if tx.requests != 1 {
			t.Errorf("the ids' reads after a read ahead took %d more requests; want 0", tx.requests-1)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if aheadRequests != 0 {
		t.Errorf("after Prefetch, the group's reads took %d more requests; want 0 (on demand: %d)", aheadRequests, demandRequests)
	}
	if demandRequests < len(ids) {
		t.Errorf("on demand the reads took %d requests; the test expects at least one per id (%d), or it measures nothing", demandRequests, len(ids))
	}
	if !reflect.DeepEqual(onDemand, ahead) {
		t.Errorf("read ahead, the group saw\n%+v\non demand\n%+v", ahead, onDemand)
	}
	if len(ahead.deps[0]) != 1 || ahead.deps[0][0] != "t01" || len(ahead.ready) != 10 {
		t.Errorf("deps of t00 = %v, %d ready read; want [t01], 10", ahead.deps[0], len(ahead.ready))
	}
}

// TestPrefetch_WarmHandleReadsItsCandidatesOnce: a handle that commits
// group after group with nobody else writing reads a wider first ready
// page and keeps its candidates' records in its cache, so most claims
// after the first cost the request that begins them and nothing more; a
// cold handle reads its candidates each time.
func TestPrefetch_WarmHandleReadsItsCandidatesOnce(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	now := time.Now()
	const n = 60
	putAvailable(t, s, n, now)
	// claim takes the first ready task in one transaction (as fence's
	// claim-next does) and returns the requests that transaction made.
	claim := func(s journal.Store) (id string, requests int) {
		t.Helper()
		err := s.(journal.Prefetcher).UpdateReading(nil, true, func(jt journal.Tx) error {
			tx := jt.(*Tx)
			var rec record.Task
			tx.Ready(func(cand string) bool {
				r, ok, err := tx.Task(cand)
				if err != nil || !ok {
					t.Fatalf("Task(%s) = %v, %v", cand, ok, err)
				}
				rec = r
				return false
			})
			if rec.ID == "" {
				t.Fatal("nothing ready")
			}
			old := rec
			rec.State = record.Claimed
			rec.Lease = &record.Lease{Token: rec.Seq, Agent: "a", ClaimedAt: now, Deadline: now.Add(time.Hour), TTL: time.Hour}
			id, requests = rec.ID, tx.requests
			return tx.PutTask(&old, rec)
		})
		if err != nil {
			t.Fatal(err)
		}
		return id, requests
	}
	// A handle of its own: the one that added the tasks has their
	// records cached already.
	_, s = open(t, cfg, dir)
	var warm []int
	for i := range 40 {
		id, req := claim(s)
		if want := fmt.Sprintf("t%02d", i); id != want {
			t.Fatalf("claim %d took %s; want %s (claim order)", i, id, want)
		}
		warm = append(warm, req)
	}
	beginOnly := 0
	for _, r := range warm[1:] {
		if r == 1 {
			beginOnly++
		}
	}
	if beginOnly < 30 {
		t.Errorf("requests per claim of a warm handle: %v; want most (≥ 30 of 39) to be the begin alone", warm)
	}
	// A handle that another writer keeps passing stays cold: each of its
	// claims reads its candidates after begin.
	_, other := open(t, cfg, dir)
	for i := range 3 {
		claim(other)
		if _, req := claim(s); req < 2 {
			t.Errorf("claim %d of a handle another writer passed made %d requests; want ≥ 2 (begin, then its candidates)", i, req)
		}
	}
}

// TestPrefetch_LeasesReadTheirTasksAhead: a walk over the leases that
// reads each task (status, the dashboard) takes a request per
// leasesAhead tasks, not one per task, and reads what reading on demand
// reads.
func TestPrefetch_LeasesReadTheirTasksAhead(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	n := leasesAhead + 8
	putClaimed(t, s, n)
	_, fresh := open(t, cfg, dir) // a handle that did not write them: nothing cached (as status, a process of its own)
	var got []record.Task
	var requests int
	err := fresh.View(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		if err := tx.begin(); err != nil {
			return err
		}
		before := tx.requests
		err := tx.Leases(func(id string) error {
			rec, ok, err := tx.Task(id)
			if err == nil && !ok {
				err = fmt.Errorf("lease of %s without a record", id)
			}
			got = append(got, rec)
			return err
		})
		requests = tx.requests - before
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The expiry page (1), then two read-ahead requests.
	if len(got) != n || requests > 3 {
		t.Errorf("%d leases read in %d requests; want %d in at most 3", len(got), requests, n)
	}
	for _, rec := range got {
		if rec.State != record.Claimed || rec.Lease == nil {
			t.Errorf("task %s read back %s, lease %v; want claimed with its lease", rec.ID, rec.State, rec.Lease)
		}
	}
}

// TestPrefetch_DependentsReadTheirTasksAhead: releasing a task's
// dependents reads each one's record; they come with the index page, a
// request per page, not one per dependent.
func TestPrefetch_DependentsReadTheirTasksAhead(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	const n = 24
	now := time.Now()
	for lo := 0; lo < n; lo += 8 { // etcd takes 128 operations a transaction
		err := s.Update(func(tx journal.Tx) error {
			for i := lo; i < lo+8; i++ {
				rec := record.Task{ID: fmt.Sprintf("d%02d", i), State: record.Waiting, MaxAttempts: 3, Seq: uint64(i + 1), Created: now, Updated: now, After: []string{"root"}}
				if err := tx.PutTask(nil, rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_, fresh := open(t, cfg, dir) // nothing cached
	var got []string
	var requests int
	err := fresh.View(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		if err := tx.begin(); err != nil {
			return err
		}
		before := tx.requests
		var ids []string
		if err := tx.Dependents("root", func(id string) bool { ids = append(ids, id); return true }); err != nil {
			return err
		}
		for _, id := range ids {
			rec, ok, err := tx.Task(id)
			if err != nil || !ok {
				return fmt.Errorf("Task(%s) = %v, %v", id, ok, err)
			}
			got = append(got, rec.ID)
		}
		requests = tx.requests - before
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n || requests > 2 {
		t.Errorf("%d dependents read in %d requests; want %d in at most 2 (the page, then the records)", len(got), requests, n)
	}
}

// TestPrefetch_ExpiredReadTheirTasksAhead: the tasks whose leases etcd
// expired are read ahead with the answer, for the reap that reads each:
// a request for all of them (up to leasesAhead), not one per task.
func TestPrefetch_ExpiredReadTheirTasksAhead(t *testing.T) {
	cfg, dir := newJournal(t)
	b, s := open(t, cfg, dir)
	const n = 20
	putClaimed(t, s, n)
	// What etcd does when the leases run out.
	if _, err := b.cli.Delete(context.Background(), cfg.Prefix+famLive, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	_, fresh := open(t, cfg, dir) // nothing cached
	var got, requests int
	err := fresh.Update(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		tx.SweepAll()
		if err := tx.begin(); err != nil {
			return err
		}
		ids := tx.Expired(tx.Now())
		before := tx.requests
		got = 0
		for _, id := range ids {
			if _, ok, err := tx.Task(id); err != nil || !ok {
				return fmt.Errorf("Task(%s) = %v, %v", id, ok, err)
			}
			got++
		}
		requests = tx.requests - before
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != n || requests != 0 {
		t.Errorf("%d expired tasks read in %d requests after Expired; want %d read with its answer", got, requests, n)
	}
}

// putClaimed stores n claimed tasks c00…, each with its liveness key, a
// few per transaction (etcd takes 128 operations in one).
func putClaimed(t *testing.T, s journal.Store, n int) {
	t.Helper()
	now := time.Now()
	for lo := 0; lo < n; lo += 5 {
		err := s.Update(func(tx journal.Tx) error {
			for i := lo; i < min(lo+5, n); i++ {
				rec := record.Task{ID: fmt.Sprintf("c%02d", i), State: record.Claimed, MaxAttempts: 3, Seq: uint64(i + 1), Created: now, Updated: now,
					Lease: &record.Lease{Token: uint64(i + 1), Agent: "a", ClaimedAt: now, Deadline: now.Add(time.Hour), TTL: time.Hour}}
				if err := tx.PutTask(nil, rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
