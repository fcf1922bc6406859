package bolt_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

// Fuzz targets of the torture suite (part 4): arbitrary bytes stored as a
// task record or an event in a real bbolt journal, written with bbolt
// directly under the bucket and key the journal uses, then read back
// through the journal's Tx methods. Every read must end in a value or an
// error, never a panic. boltstore.DB's guard turns a panic inside a
// transaction into a *CorruptError, so a CorruptError here (the file itself
// is sound) means a panic was masked, and fails the target too.

// Bucket and key names as stored on disk (journal/keys.go), spelled out so
// that the test pins the format.
var (
	rawTasks      = []byte("tasks")
	rawEvents     = []byte("events")
	rawTaskEvents = []byte("task_events")
	rawMeta       = []byte("meta")
	rawLastCommit = []byte("last_commit")
)

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// fuzzJournal creates a journal in a fresh directory for one fuzz worker.
func fuzzJournal(f *testing.F) string {
	dir := f.TempDir()
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		f.Fatal(err)
	}
	return dir
}

// rawUpdate opens the journal file with bbolt alone (no boltstore.Open, so
// nothing validates) and runs fn in one write transaction. NoSync: the
// bytes only need to reach the page cache for the next open to see them.
func rawUpdate(t *testing.T, dir string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	b, err := bolt.Open(boltstore.Path(dir), 0o600, &bolt.Options{Timeout: time.Second, NoSync: true})
	if err != nil {
		t.Fatalf("raw open: %v", err)
	}
	defer b.Close()
	if err := b.Update(fn); err != nil {
		t.Fatalf("raw update: %v", err)
	}
}

// emptyBucket deletes every key of bucket name.
func emptyBucket(tx *bolt.Tx, name []byte) error {
	if err := tx.DeleteBucket(name); err != nil {
		return err
	}
	_, err := tx.CreateBucket(name)
	return err
}

// openRead opens the journal read-only through the journal package.
func openRead(t *testing.T, dir string) *boltstore.DB {
	t.Helper()
	db, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("boltstore.Open: %v", err)
	}
	return db
}

// notMasked fails the test if err is a *journal.CorruptError: with a sound
// file, that can only be a panic the guard caught.
func notMasked(t *testing.T, what string, err error) {
	t.Helper()
	var ce *journal.CorruptError
	if errors.As(err, &ce) {
		t.Fatalf("%s: %v (a panic inside the transaction, caught by the guard)", what, err)
	}
}

// goodRecord is a valid record stored next to the fuzzed one, so the scans
// have something before and after it.
func goodRecord() record.Task {
	dl := t0.Add(time.Minute)
	return record.Task{ID: "good", State: record.Claimed, Priority: 1, MaxAttempts: 3, Seq: 1, Created: t0, Updated: t0,
		Lease: &record.Lease{Token: 7, Agent: "a", ClaimedAt: t0, Deadline: dl, TTL: time.Minute}}
}

// FuzzDecodeRecord stores value as the task record of key and reads it back
// with Task, ForEachTask and Counts.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := json.Marshal(goodRecord())
	f.Add("t1", good)
	f.Add("t1", []byte(`{"id":"t1","state":"available","priority":-9223372036854775808,"seq":18446744073709551615}`))
	f.Add("t1", []byte(`{"id":"../../etc/passwd","state":"claimed","lease":{"token":1,"deadline":"9999-12-31T23:59:59Z","ttl":-1}}`))
	f.Add("t1", []byte(`{"state":"bogus","lease":null,"last":{"by":"nothing"}}`))
	f.Add("t1", []byte(`{"created":"not a time"}`))
	f.Add("t1", []byte(`{"priority":1e400}`))
	f.Add("t1", []byte(`{"max_attempts":99999999999999999999}`))
	f.Add("t1", []byte(`[]`))
	f.Add("t1", []byte(`null`))
	f.Add("t1", []byte(``))
	f.Add("t1", []byte("\xff\xfe\x00garbage"))
	f.Add("t1", []byte(`{"id":"t1","id":"t2"}`))
	f.Add("a\x00b", []byte(`{"lease":{"deadline":"0001-01-01T00:00:00Z"}}`))
	f.Add("zzz", []byte(`{"seq":1`+strings.Repeat(" ", 1000)+`}`))
	f.Add("t1", []byte(strings.Repeat(`{"last":`, 10000)+`null`+strings.Repeat(`}`, 10000)))
	// The binary form (journal/codec.go): whole, cut short, with a byte
	// too many, with a huge string length, and an unknown version.
	bin := journal.EncodeTask(goodRecord())
	f.Add("t1", bin)
	f.Add("t1", bin[:len(bin)/2])
	f.Add("t1", append(append([]byte{}, bin...), 0))
	f.Add("t1", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add("t1", []byte{3, 't', '1'})
	// codecV2: a record with dependencies, labels and a not-before time,
	// and one whose list length runs past the end.
	v2 := goodRecord()
	v2.After, v2.Labels, v2.NotBefore = []string{"dep-1", "dep-2"}, []string{"gpu", "linux"}, t0
	bin2 := journal.EncodeTask(v2)
	f.Add("t1", bin2)
	f.Add("t1", bin2[:len(bin2)-3])
	f.Add("t1", append(append([]byte{}, bin[:len(bin)]...), 0xff, 0xff, 0x03))

	dir := fuzzJournal(f)
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		if key == "" || len(key) > bolt.MaxKeySize {
			key = "t1"
		}
		rawUpdate(t, dir, func(tx *bolt.Tx) error {
			if err := emptyBucket(tx, rawTasks); err != nil {
				return err
			}
			b := tx.Bucket(rawTasks)
			if key != "good" {
				if err := b.Put([]byte("good"), good); err != nil {
					return err
				}
			}
			return b.Put([]byte(key), value)
		})

		db := openRead(t, dir)
		defer db.Close()
		err := db.View(func(tx journal.Tx) error {
			rec, ok, err := tx.Task(key)
			switch {
			case err != nil && ok:
				t.Errorf("Task(%q) = ok and error %v", key, err)
			case err == nil && !ok:
				t.Errorf("Task(%q): stored value not found", key)
			case err != nil && !strings.Contains(err.Error(), "decode task"):
				t.Errorf("Task(%q) error %q does not say what failed", key, err)
			}
			if err == nil && ok {
				// A record that decodes is usable: it marshals back.
				if _, merr := json.Marshal(rec); merr != nil {
					t.Errorf("decoded record does not marshal: %v", merr)
				}
			}
			n := 0
			ferr := tx.ForEachTask(func(record.Task) error { n++; return nil })
			if (ferr != nil) != (err != nil) {
				t.Errorf("ForEachTask error %v, but Task(%q) error %v", ferr, key, err)
			}
			_ = tx.Counts()
			return nil
		})
		notMasked(t, "View", err)
		if err != nil {
			t.Fatalf("View: %v", err)
		}
	})
}

// FuzzDecodeEvent stores value as the event at seq (with a valid event
// before it, the per-task index entry of task and a last-commit range
// naming it) and reads the log through Events, EventsBackward, LastCommit
// and TaskEventsBackward.
func FuzzDecodeEvent(f *testing.F) {
	dl := t0.Add(time.Minute)
	valid, _ := json.Marshal(record.Event{Seq: 2, Time: t0, Type: record.EvClaim, Task: "t1", From: record.Available,
		To: record.Claimed, Agent: "a", Token: 5, Deadline: &dl})
	f.Add(uint64(2), "t1", valid)
	f.Add(uint64(2), "t1", []byte(`{"seq":0,"type":"claim","task":"t1","deadline":null}`))
	f.Add(uint64(2), "t1", []byte(`{"seq":18446744073709551615,"type":"add","task":"../../x","to":"done","staged":"../../../etc/passwd","output":"../x","source":"/tmp"}`))
	f.Add(uint64(3), "t1", []byte(`{"seq":1,"type":"heartbeat"}`))
	f.Add(uint64(0), "", []byte(`{"time":"garbage"}`))
	f.Add(uint64(1), "t1", []byte(`{}`))
	f.Add(uint64(18446744073709551615), "x", []byte(`{"token":-1}`))
	f.Add(uint64(2), "t1", []byte(`{"deadline":"99999-01-01T00:00:00Z"}`))
	f.Add(uint64(2), "t1", []byte(`{"priority":"high"}`))
	f.Add(uint64(2), "t1", []byte("\x00\x01\x02"))
	f.Add(uint64(2), "t1", []byte(``))
	f.Add(uint64(2), "t1", []byte(`{"type":"put","output":"../../escape","staged":".."}`))
	bin := journal.EncodeEvent(record.Event{Seq: 2, Time: t0, Type: record.EvClaim, Task: "t1", From: record.Available,
		To: record.Claimed, Agent: "a", Token: 5, Deadline: &dl})
	f.Add(uint64(2), "t1", bin)
	f.Add(uint64(2), "t1", journal.EncodeEvent(record.Event{Seq: 2, Time: t0, Type: record.EvAdd, Task: "t1",
		To: record.Available, After: []string{"t0"}, Labels: []string{"gpu"}, NotBefore: t0}))
	f.Add(uint64(2), "t1", bin[:len(bin)-1])
	f.Add(uint64(2), "t1", []byte{1, 2, 1, 0x80})

	dir := fuzzJournal(f)
	first, _ := json.Marshal(record.Event{Seq: 1, Time: t0, Type: record.EvAdd, Task: "t1", To: record.Available})
	f.Fuzz(func(t *testing.T, seq uint64, task string, value []byte) {
		if len(task)+9 > bolt.MaxKeySize {
			task = task[:bolt.MaxKeySize-9]
		}
		rawUpdate(t, dir, func(tx *bolt.Tx) error {
			for _, name := range [][]byte{rawEvents, rawTaskEvents} {
				if err := emptyBucket(tx, name); err != nil {
					return err
				}
			}
			ev, idx := tx.Bucket(rawEvents), tx.Bucket(rawTaskEvents)
			if seq != 1 {
				if err := ev.Put(be64(1), first); err != nil {
					return err
				}
				if err := idx.Put(append([]byte("t1\x00"), be64(1)...), nil); err != nil {
					return err
				}
			}
			if err := ev.Put(be64(seq), value); err != nil {
				return err
			}
			if err := idx.Put(append(append([]byte(task), 0), be64(seq)...), nil); err != nil {
				return err
			}
			return tx.Bucket(rawMeta).Put(rawLastCommit, append(be64(seq), be64(seq)...))
		})

		db := openRead(t, dir)
		defer db.Close()
		err := db.View(func(tx journal.Tx) error {
			var fwd, back []record.Event
			ferr := tx.Events(0, func(ev record.Event) (bool, error) { fwd = append(fwd, ev); return true, nil })
			berr := tx.EventsBackward(func(ev record.Event) (bool, error) { back = append(back, ev); return true, nil })
			if (ferr != nil) != (berr != nil) {
				t.Errorf("Events error %v but EventsBackward error %v", ferr, berr)
			}
			if ferr == nil && len(fwd) != len(back) {
				t.Errorf("Events read %d events, EventsBackward %d", len(fwd), len(back))
			}
			for _, err := range []error{ferr, berr} {
				if err != nil && !strings.Contains(err.Error(), "decode event") {
					t.Errorf("error %q does not say what failed", err)
				}
			}
			last, lerr := tx.LastCommit()
			if lerr == nil && len(last) == 0 {
				t.Errorf("LastCommit returned no event and no error for a stored range")
			}
			_ = tx.TaskEventsBackward(task, func(record.Event) (bool, error) { return true, nil })
			_ = tx.TaskEventsBackward("t1", func(record.Event) (bool, error) { return true, nil })
			return nil
		})
		notMasked(t, "View", err)
		if err != nil {
			t.Fatalf("View: %v", err)
		}
	})
}
