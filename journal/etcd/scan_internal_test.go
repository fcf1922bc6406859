package etcd

import (
	"fmt"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// TestTasksFrom_ReadsOnePage: a page of a listing costs what one page
// costs, wherever it starts and however many tasks the journal holds: the
// records from the cursor on in one request, and the liveness keys of the
// claimed ones among them in one more, never one request per claimed task
// nor a scan from the start.
func TestTasksFrom_ReadsOnePage(t *testing.T) {
	cfg, dir := newJournal(t)
	_, s := open(t, cfg, dir)
	now := time.Now()
	const n, batch = 700, 40 // batch: well inside etcd's 128 operations a transaction
	for i := 0; i < n; i += batch {
		err := s.Update(func(tx journal.Tx) error {
			for j := i; j < i+batch; j++ {
				rec := record.Task{ID: fmt.Sprintf("t%04d", j), State: record.Available, MaxAttempts: 3, Seq: uint64(j + 1), Created: now, Updated: now}
				if j%10 == 0 {
					rec.State = record.Claimed
					rec.Lease = &record.Lease{Token: uint64(j + 1), Agent: "a", ClaimedAt: now, Deadline: now.Add(time.Hour), TTL: time.Hour}
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
	err := s.View(func(jt journal.Tx) error {
		tx := jt.(*Tx)
		tx.Counts() // the snapshot's own read, not the scan's
		before := tx.requests
		var ids []string
		claimed := 0
		err := tx.TasksFrom("t0300", func(r record.Task) (bool, error) {
			ids = append(ids, r.ID)
			if r.State == record.Claimed {
				claimed++
				if r.Lease == nil || !r.Lease.Deadline.After(tx.Now()) {
					t.Errorf("%s: lease %+v read back expired; its liveness key lives", r.ID, r.Lease)
				}
			}
			return len(ids) < 100, nil
		})
		if err != nil {
			return err
		}
		if len(ids) != 100 || ids[0] != "t0301" || ids[99] != "t0400" || claimed != 10 {
			t.Errorf("TasksFrom(t0300) for 100 gave %d ids, %v … %v, %d claimed; want t0301 … t0400, 10 claimed", len(ids), ids[:min(1, len(ids))], ids[max(0, len(ids)-1):], claimed)
		}
		if got := tx.requests - before; got != 2 {
			t.Errorf("a page of 100 took %d requests; want 2 (the records, then the claimed ones' liveness keys)", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
