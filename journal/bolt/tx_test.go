package bolt_test

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

func TestTx_NextTokenStrictlyIncreases(t *testing.T) {
	db, _ := newJournal(t)
	var got []uint64
	// Clock at, behind and ahead of the counter, within one transaction
	// and across several.
	clocks := []time.Time{t0, t0, t0.Add(-time.Hour), t0.Add(time.Second), t0.Add(time.Second), time.Unix(0, 0), t0.Add(2 * time.Second)}
	for i, now := range clocks {
		update(t, db, func(tx journal.Tx) error {
			for j := 0; j < 1+i%3; j++ {
				tok, err := tx.NextToken(now)
				if err != nil {
					return err
				}
				if floor := uint64(now.UnixMicro()); now.After(time.Unix(0, 0)) && tok < floor {
					t.Errorf("NextToken(%v) = %d, below the clock in µs %d", now, tok, floor)
				}
				if tx.LastToken() != tok {
					t.Errorf("LastToken = %d right after NextToken returned %d", tx.LastToken(), tok)
				}
				got = append(got, tok)
			}
			return nil
		})
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("tokens do not strictly increase: %v", got)
		}
	}
	if first := got[0]; first <= uint64(t0.UnixMicro()) {
		t.Errorf("first token %d is not above the seed %d", first, t0.UnixMicro())
	}
	// A jump of the clock is taken: the token is the clock's µs.
	var jumped uint64
	later := t0.Add(24 * time.Hour)
	update(t, db, func(tx journal.Tx) error {
		var err error
		jumped, err = tx.NextToken(later)
		return err
	})
	if jumped != uint64(later.UnixMicro()) {
		t.Errorf("NextToken after the clock moved on a day = %d, want %d", jumped, later.UnixMicro())
	}
}

func TestTx_NextTokenPersists(t *testing.T) {
	dir := newJournalClosed(t)
	var last uint64
	for i := 0; i < 3; i++ {
		db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		update(t, db, func(tx journal.Tx) error {
			if tx.LastToken() != last && last != 0 {
				t.Errorf("reopened journal: LastToken = %d, want %d", tx.LastToken(), last)
			}
			tok, err := tx.NextToken(t0) // the clock stands still: only the counter moves
			if tok <= last {
				t.Errorf("token after reopen %d not above %d", tok, last)
			}
			last = tok
			return err
		})
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTx_FreshJournalStartsAboveOldTokens(t *testing.T) {
	// Deterministic clocks: an old journal issues tokens at t0, the tree is
	// lost and rebuilt a second later.
	old, _ := newJournal(t)
	var highest uint64
	update(t, old, func(tx journal.Tx) error {
		for i := 0; i < 100; i++ {
			tok, err := tx.NextToken(t0.Add(time.Duration(i) * time.Microsecond / 2))
			if err != nil {
				return err
			}
			highest = tok
		}
		return nil
	})
	dir := t.TempDir()
	if err := boltstore.Create(dir, defaults, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	fresh, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	update(t, fresh, func(tx journal.Tx) error {
		if tx.LastToken() <= highest {
			t.Errorf("fresh journal's counter %d is not above the old journal's last token %d", tx.LastToken(), highest)
		}
		tok, err := tx.NextToken(t0.Add(time.Second))
		if tok <= highest {
			t.Errorf("fresh journal's first token %d is not above the old journal's last token %d", tok, highest)
		}
		return err
	})

	// The same with the real clock, as fencectl uses it.
	realOld := newJournalAt(t, time.Now())
	update(t, realOld, func(tx journal.Tx) error {
		for i := 0; i < 3; i++ {
			tok, err := tx.NextToken(time.Now())
			if err != nil {
				return err
			}
			highest = tok
		}
		return nil
	})
	realFresh := newJournalAt(t, time.Now())
	update(t, realFresh, func(tx journal.Tx) error {
		tok, err := tx.NextToken(time.Now())
		if tok <= highest {
			t.Errorf("real clock: fresh journal's first token %d is not above the old one's %d", tok, highest)
		}
		return err
	})
}

// newJournalAt creates and opens a journal seeded at now.
func newJournalAt(t *testing.T, now time.Time) *boltstore.DB {
	t.Helper()
	dir := t.TempDir()
	if err := boltstore.Create(dir, defaults, now); err != nil {
		t.Fatal(err)
	}
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestTx_ReadyOrder(t *testing.T) {
	db, _ := newJournal(t)
	// Put in an order unrelated to the expected one; seq is the age.
	recs := []record.Task{
		available("p0-old", 0, 3),
		available("neg", -5, 1),
		available("max", math.MaxInt64, 9),
		available("p10-young", 10, 8),
		available("min", math.MinInt64, 2),
		available("p10-old", 10, 4),
		available("p0-young", 0, 7),
		available("p1", 1, 10),
		available("neg1", -1, 5),
	}
	want := []string{"max", "p10-old", "p10-young", "p1", "p0-old", "p0-young", "neg1", "neg", "min"}
	update(t, db, func(tx journal.Tx) error {
		for _, r := range recs {
			if err := tx.PutTask(nil, r); err != nil {
				return err
			}
		}
		return nil
	})
	var got []string
	for i := range want {
		update(t, db, func(tx journal.Tx) error {
			id, ok := tx.(*boltstore.Tx).NextReady()
			if !ok {
				t.Fatalf("NextReady: nothing after %v", got)
			}
			got = append(got, id)
			old, _, err := tx.Task(id)
			if err != nil {
				return err
			}
			if c := tx.Counts()[record.Available]; c != len(want)-i {
				t.Errorf("Counts[available] = %d, want %d", c, len(want)-i)
			}
			return tx.PutTask(&old, claimed(old, uint64(100+i), t0.Add(time.Minute)))
		})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("claim order = %v\nwant            %v", got, want)
	}
	view(t, db, func(tx journal.Tx) error {
		if id, ok := tx.(*boltstore.Tx).NextReady(); ok {
			t.Errorf("NextReady = %q after every task was claimed", id)
		}
		return nil
	})
}

func TestTx_ReadyIndexFollowsRecord(t *testing.T) {
	db, _ := newJournal(t)
	a, b := available("a", 0, 1), available("b", 0, 2)
	update(t, db, func(tx journal.Tx) error {
		if err := tx.PutTask(nil, a); err != nil {
			return err
		}
		return tx.PutTask(nil, b)
	})
	// Raising b's priority moves it ahead; the old key must be gone.
	b2 := b
	b2.Priority = 5
	update(t, db, func(tx journal.Tx) error { return tx.PutTask(&b, b2) })
	view(t, db, func(tx journal.Tx) error {
		if id, _ := tx.(*boltstore.Tx).NextReady(); id != "b" {
			t.Errorf("NextReady = %q, want b after raising its priority", id)
		}
		if ready, _ := tx.IndexSizes(); ready != 2 {
			t.Errorf("ready index holds %d entries, want 2 (old key not removed?)", ready)
		}
		return nil
	})
	// Done leaves the index; requeue puts it back.
	d := b2
	d.State = record.Done
	update(t, db, func(tx journal.Tx) error { return tx.PutTask(&b2, d) })
	view(t, db, func(tx journal.Tx) error {
		if id, _ := tx.(*boltstore.Tx).NextReady(); id != "a" {
			t.Errorf("NextReady = %q, want a once b is done", id)
		}
		if ready, _ := tx.IndexSizes(); ready != 1 {
			t.Errorf("ready index holds %d entries, want 1", ready)
		}
		return nil
	})
}

func TestTx_ExpiryIndex(t *testing.T) {
	db, _ := newJournal(t)
	deadlines := map[string]time.Time{
		"d3":  t0.Add(3 * time.Minute),
		"d1":  t0.Add(1 * time.Minute),
		"d2":  t0.Add(2 * time.Minute),
		"d1b": t0.Add(1 * time.Minute), // same deadline as d1, later token
		"d0":  t0.Add(-time.Hour),      // long expired
	}
	tokens := map[string]uint64{"d3": 10, "d1": 11, "d2": 12, "d1b": 13, "d0": 14}
	recs := map[string]record.Task{}
	update(t, db, func(tx journal.Tx) error {
		seq := uint64(0)
		for _, id := range []string{"d3", "d1", "d2", "d1b", "d0"} {
			seq++
			r := claimed(available(id, 0, seq), tokens[id], deadlines[id])
			recs[id] = r
			if err := tx.PutTask(nil, r); err != nil {
				return err
			}
		}
		return tx.PutTask(nil, available("free", 0, 99))
	})
	for _, tc := range []struct {
		now  time.Time
		want []string
	}{
		{t0.Add(-2 * time.Hour), nil},
		{t0, []string{"d0"}},
		{t0.Add(time.Minute - time.Nanosecond), []string{"d0"}},
		{t0.Add(time.Minute), []string{"d0", "d1", "d1b"}}, // at the deadline counts
		{t0.Add(2*time.Minute + time.Second), []string{"d0", "d1", "d1b", "d2"}},
		{t0.Add(time.Hour), []string{"d0", "d1", "d1b", "d2", "d3"}},
	} {
		view(t, db, func(tx journal.Tx) error {
			got := tx.Expired(tc.now)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Expired(t0%+v) = %v, want %v", tc.now.Sub(t0), got, tc.want)
			}
			return nil
		})
	}
	view(t, db, func(tx journal.Tx) error {
		var all []string
		if err := tx.Leases(func(id string) error { all = append(all, id); return nil }); err != nil {
			return err
		}
		if want := []string{"d0", "d1", "d1b", "d2", "d3"}; !reflect.DeepEqual(all, want) {
			t.Errorf("Leases order = %v, want %v", all, want)
		}
		return nil
	})
	// A heartbeat moves d1's entry; completing d0 removes it.
	hb := recs["d1"]
	l := *hb.Lease
	l.Deadline = t0.Add(time.Hour)
	hb.Lease = &l
	done := recs["d0"]
	done.State, done.Lease = record.Done, nil
	update(t, db, func(tx journal.Tx) error {
		old := recs["d1"]
		if err := tx.PutTask(&old, hb); err != nil {
			return err
		}
		old0 := recs["d0"]
		return tx.PutTask(&old0, done)
	})
	view(t, db, func(tx journal.Tx) error {
		if got, want := tx.Expired(t0.Add(2*time.Minute)), []string{"d1b", "d2"}; !reflect.DeepEqual(got, want) {
			t.Errorf("after heartbeat and complete: Expired = %v, want %v", got, want)
		}
		if _, expiry := tx.IndexSizes(); expiry != 4 {
			t.Errorf("expiry index holds %d entries, want 4", expiry)
		}
		return nil
	})
}

func TestTx_Counts(t *testing.T) {
	db, _ := newJournal(t)
	a := available("a", 0, 1)
	b := available("b", 0, 2)
	c := available("c", 0, 3)
	update(t, db, func(tx journal.Tx) error {
		for _, r := range []record.Task{a, b, c} {
			if err := tx.PutTask(nil, r); err != nil {
				return err
			}
		}
		return nil
	})
	check := func(want map[record.State]int) {
		t.Helper()
		view(t, db, func(tx journal.Tx) error {
			got := tx.Counts()
			for _, s := range record.States {
				if got[s] != want[s] {
					t.Errorf("Counts[%s] = %d, want %d", s, got[s], want[s])
				}
			}
			return nil
		})
	}
	check(map[record.State]int{record.Available: 3})
	ac := claimed(a, 1, t0.Add(time.Minute))
	bf := b
	bf.State = record.Failed
	update(t, db, func(tx journal.Tx) error {
		if err := tx.PutTask(&a, ac); err != nil {
			return err
		}
		return tx.PutTask(&b, bf)
	})
	check(map[record.State]int{record.Available: 1, record.Claimed: 1, record.Failed: 1})
	ad := ac
	ad.State, ad.Lease = record.Done, nil
	update(t, db, func(tx journal.Tx) error { return tx.PutTask(&ac, ad) })
	check(map[record.State]int{record.Available: 1, record.Done: 1, record.Failed: 1})
	// Rewriting a record in the same state keeps the count.
	c2 := c
	c2.Priority = 3
	update(t, db, func(tx journal.Tx) error { return tx.PutTask(&c, c2) })
	check(map[record.State]int{record.Available: 1, record.Done: 1, record.Failed: 1})
}

func TestTx_TaskRoundTrip(t *testing.T) {
	db, _ := newJournal(t)
	rec := claimed(available("t1", 7, 42), 1234, t0.Add(90*time.Second))
	rec.Attempts = 2
	rec.Lease.RequestID = "req-1"
	rec.Last = &record.LeaseEnd{Token: 1000, Agent: "old", At: t0.Add(-time.Minute), By: record.EvReap, Reason: "lease expired"}
	update(t, db, func(tx journal.Tx) error { return tx.PutTask(nil, rec) })
	view(t, db, func(tx journal.Tx) error {
		got, ok, err := tx.Task("t1")
		if err != nil || !ok {
			t.Fatalf("Task(t1) = ok %v, err %v", ok, err)
		}
		if !reflect.DeepEqual(got, rec) {
			t.Errorf("Task round trip:\n got %+v\nwant %+v", got, rec)
		}
		if _, ok, err := tx.Task("t2"); ok || err != nil {
			t.Errorf("Task(unknown) = ok %v, err %v", ok, err)
		}
		var ids []string
		if err := tx.ForEachTask(func(r record.Task) error { ids = append(ids, r.ID); return nil }); err != nil {
			return err
		}
		if !reflect.DeepEqual(ids, []string{"t1"}) {
			t.Errorf("ForEachTask = %v", ids)
		}
		return nil
	})
}

func TestTx_Claims(t *testing.T) {
	db, _ := newJournal(t)
	cs := []record.Claim{
		{Token: 30, Task: "b", Agent: "x", At: t0},
		{Token: 10, Task: "a", Agent: "y", At: t0, RequestID: "r", Ended: &record.LeaseEnd{Token: 10, Agent: "y", At: t0.Add(time.Second), By: record.EvRevoke}},
		{Token: 20, Task: "a", Agent: "z", At: t0},
	}
	update(t, db, func(tx journal.Tx) error {
		for _, c := range cs {
			if err := tx.PutClaim(c); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, db, func(tx journal.Tx) error {
		got, ok, err := tx.Claim(10)
		if err != nil || !ok || !reflect.DeepEqual(got, cs[1]) {
			t.Errorf("Claim(10) = %+v, %v, %v; want %+v", got, ok, err, cs[1])
		}
		if _, ok, err := tx.Claim(11); ok || err != nil {
			t.Errorf("Claim(never issued) = ok %v, err %v", ok, err)
		}
		var order []uint64
		if err := tx.ForEachClaim(func(c record.Claim) error { order = append(order, c.Token); return nil }); err != nil {
			return err
		}
		if !reflect.DeepEqual(order, []uint64{10, 20, 30}) {
			t.Errorf("ForEachClaim order = %v, want token order", order)
		}
		return nil
	})
}

func TestTx_Reset(t *testing.T) {
	db, _ := newJournal(t)
	var token uint64
	update(t, db, func(tx journal.Tx) error {
		for i, id := range []string{"a", "b", "c"} {
			if _, err := tx.Append(record.Event{Time: t0, Type: record.EvAdd, Task: id, To: record.Available}); err != nil {
				return err
			}
			if err := tx.PutTask(nil, available(id, 0, uint64(i+1))); err != nil {
				return err
			}
		}
		var err error
		if token, err = tx.NextToken(t0); err != nil {
			return err
		}
		a, _, _ := tx.Task("a")
		if err := tx.PutTask(&a, claimed(a, token, t0.Add(time.Minute))); err != nil {
			return err
		}
		return tx.PutClaim(record.Claim{Token: token, Task: "a", Agent: "x", At: t0})
	})
	var treeID string
	view(t, db, func(tx journal.Tx) error { treeID = tx.(*boltstore.Tx).TreeID(); return nil })
	update(t, db, func(tx journal.Tx) error { return tx.Reset() })
	view(t, db, func(tx journal.Tx) error {
		for s, n := range tx.Counts() {
			if n != 0 {
				t.Errorf("after Reset Counts[%s] = %d", s, n)
			}
		}
		if _, ok, _ := tx.Task("a"); ok {
			t.Errorf("after Reset task a still stored")
		}
		if _, ok, _ := tx.Claim(token); ok {
			t.Errorf("after Reset claim %d still stored", token)
		}
		if id, ok := tx.(*boltstore.Tx).NextReady(); ok {
			t.Errorf("after Reset NextReady = %q", id)
		}
		if ids := tx.Expired(t0.Add(time.Hour)); len(ids) != 0 {
			t.Errorf("after Reset Expired = %v", ids)
		}
		if r, e := tx.IndexSizes(); r != 0 || e != 0 {
			t.Errorf("after Reset IndexSizes = %d, %d", r, e)
		}
		// Kept: events, the token counter, the settings and the tree id.
		n := 0
		if err := tx.Events(1, func(record.Event) (bool, error) { n++; return true, nil }); err != nil {
			return err
		}
		if n != 3 {
			t.Errorf("after Reset %d events, want the 3 kept", n)
		}
		if tx.LastToken() != token {
			t.Errorf("after Reset LastToken = %d, want %d", tx.LastToken(), token)
		}
		if tx.(*boltstore.Tx).TreeID() != treeID {
			t.Errorf("after Reset tree id changed")
		}
		if d, err := tx.Defaults(); err != nil || d != defaults {
			t.Errorf("after Reset Defaults = %+v, %v", d, err)
		}
		return nil
	})
	// The buckets work again after a Reset.
	update(t, db, func(tx journal.Tx) error { return tx.PutTask(nil, available("z", 0, 9)) })
	view(t, db, func(tx journal.Tx) error {
		if id, _ := tx.(*boltstore.Tx).NextReady(); id != "z" {
			t.Errorf("NextReady after Reset and a new put = %q, want z", id)
		}
		if tx.Counts()[record.Available] != 1 {
			t.Errorf("Counts after Reset and a new put = %v", tx.Counts())
		}
		return nil
	})
}

func TestTx_ManyTasksIndexes(t *testing.T) {
	db, _ := newJournal(t)
	const n = 500
	update(t, db, func(tx journal.Tx) error {
		for i := 0; i < n; i++ {
			// Priorities cycle 0..4; seq descending with i so that insertion
			// order differs from age order.
			if err := tx.PutTask(nil, available(fmt.Sprintf("t%03d", i), int64(i%5), uint64(n-i))); err != nil {
				return err
			}
		}
		return nil
	})
	view(t, db, func(tx journal.Tx) error {
		id, _ := tx.(*boltstore.Tx).NextReady()
		// Highest priority 4: i%5==4, oldest = smallest seq = largest i.
		if want := fmt.Sprintf("t%03d", n-1); id != want {
			t.Errorf("NextReady = %s, want %s", id, want)
		}
		if tx.Counts()[record.Available] != n {
			t.Errorf("Counts[available] = %d, want %d", tx.Counts()[record.Available], n)
		}
		return nil
	})
}

// The expiry index orders every deadline a lease can have: a lease that
// runs for centuries (a huge --ttl) is not expired now.
func TestTx_ExpiryIndexFarFuture(t *testing.T) {
	db, _ := newJournal(t)
	far := t0.Add(time.Duration(math.MaxInt64)) // the longest time.Duration: ~292 years
	near := t0.Add(time.Minute)
	update(t, db, func(tx journal.Tx) error {
		if err := tx.PutTask(nil, claimed(available("far", 0, 1), 1, far)); err != nil {
			return err
		}
		return tx.PutTask(nil, claimed(available("near", 0, 2), 2, near))
	})
	view(t, db, func(tx journal.Tx) error {
		if got := tx.Expired(t0); len(got) != 0 {
			t.Errorf("Expired(now) = %v, want nothing (deadlines %v and %v)", got, near, far)
		}
		if got := tx.Expired(near); !reflect.DeepEqual(got, []string{"near"}) {
			t.Errorf("Expired(near deadline) = %v, want [near]", got)
		}
		return nil
	})
}

// TestTx_ReadyHeads: the first ready task of each priority, in claim
// order (the extreme priorities included), stopping when fn says so; the
// metrics' oldest available task is found among these.
func TestTx_ReadyHeads(t *testing.T) {
	db, _ := newJournal(t)
	prios := []int64{math.MaxInt64, 7, 0, -1, math.MinInt64}
	update(t, db, func(tx journal.Tx) error {
		seq := uint64(1)
		for i := range 5 { // interleaved, so that seq order is not claim order
			for _, p := range prios {
				if err := tx.PutTask(nil, available(fmt.Sprintf("p%d-%d", p, i), p, seq)); err != nil {
					return err
				}
				seq++
			}
		}
		return nil
	})
	var want []string
	for _, p := range prios {
		want = append(want, fmt.Sprintf("p%d-0", p))
	}
	view(t, db, func(tx journal.Tx) error {
		var got []string
		tx.(journal.ReadyHeads).ReadyHeads(func(id string) bool { got = append(got, id); return true })
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ReadyHeads = %v, want %v", got, want)
		}
		got = nil
		tx.(journal.ReadyHeads).ReadyHeads(func(id string) bool { got = append(got, id); return len(got) < 2 })
		if !reflect.DeepEqual(got, want[:2]) {
			t.Errorf("ReadyHeads stopped after 2 = %v, want %v", got, want[:2])
		}
		return nil
	})
}
