package etcd

import (
	"context"
	"slices"
	"testing"

	"github.com/fencectl/fencectl/journal"
)

// TestSweep_ExpiryIsFoundOnceASweepIsDue: a commit that looked for
// expired leases marks the tree swept; until the mark's etcd lease runs
// out, transactions read no expiry pages and find nothing expired, while
// the task itself is judged expired the moment etcd drops its liveness
// key (fencing never waits for a sweep). SweepAll (fencectl reap) looks
// anyway, and once the mark is gone the next claim finds the task.
func TestSweep_ExpiryIsFoundOnceASweepIsDue(t *testing.T) {
	cfg, dir := newJournal(t)
	b, s := open(t, cfg, dir)
	addReady(t, s, 0, 1, "a0", "a1", "a2")
	claimFirst(t, s) // a0; this commit swept, and marks it
	if _, err := b.cli.Delete(context.Background(), cfg.Prefix+famLive+"a0"); err != nil {
		t.Fatal(err) // what etcd does when a0's lease runs out
	}

	expired := func(all bool) (ids []string, swept bool, live bool) {
		err := s.Update(func(jt journal.Tx) error {
			tx := jt.(*Tx)
			if all {
				tx.SweepAll()
			}
			ids = tx.Expired(tx.Now())
			rec, _, err := tx.Task("a0")
			live = rec.Lease != nil && rec.Lease.Deadline.After(tx.Now())
			swept = tx.swept
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids, swept, live
	}
	ids, swept, live := expired(false)
	if len(ids) != 0 || !swept {
		t.Errorf("right after a sweep: Expired = %v, swept %v; want nothing, from the mark", ids, swept)
	}
	if live {
		t.Errorf("a0 read back with a live lease; its liveness key is gone")
	}
	if ids, _, _ := expired(true); !slices.Equal(ids, []string{"a0"}) {
		t.Errorf("SweepAll: Expired = %v, want [a0]", ids)
	}
	if _, err := b.cli.Delete(context.Background(), cfg.Prefix+famMeta+metaSweep); err != nil {
		t.Fatal(err) // what etcd does when the mark's lease runs out
	}
	if ids, swept, _ := expired(false); !slices.Equal(ids, []string{"a0"}) || swept {
		t.Errorf("with the mark gone: Expired = %v, swept %v; want [a0], from a sweep", ids, swept)
	}
}
