package main

import (
	"encoding/binary"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
	bolt "go.etcd.io/bbolt"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// legacyblocked: turn the tree's bbolt journal into what a fencectl
// before the waiting state wrote: blocked tasks in available/ (their
// records, their events, their files), no waiting/ directory, schema 4.
func cmdLegacyBlocked(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: legacyblocked")
	}
	root := ts.Getenv("FENCE_DIR")
	b, err := bolt.Open(filepath.Join(root, ".fence", "journal.db"), 0o600, nil)
	ts.Check(err)
	err = b.Update(func(tx *bolt.Tx) error {
		meta, tasks, events := tx.Bucket([]byte("meta")), tx.Bucket([]byte("tasks")), tx.Bucket([]byte("events"))
		moved := 0
		err := tasks.ForEach(func(k, v []byte) error {
			rec, err := journal.DecodeTask(v)
			if err != nil || rec.State != record.Waiting {
				return err
			}
			if len(rec.After) == 0 || !rec.NotBefore.IsZero() {
				ts.Fatalf("legacyblocked: task %s waits for a time: no old journal has one", rec.ID)
			}
			rec.State = record.Available
			moved++
			ts.Check(os.Rename(filepath.Join(root, "waiting", rec.ID), filepath.Join(root, "available", rec.ID)))
			return tasks.Put(k, journal.EncodeTask(rec))
		})
		if err != nil {
			return err
		}
		count := func(s record.State, d int) error {
			k := []byte("count:" + string(s))
			var n uint64
			if v := meta.Get(k); len(v) == 8 {
				n = binary.BigEndian.Uint64(v)
			}
			return meta.Put(k, binary.BigEndian.AppendUint64(nil, n+uint64(d)))
		}
		if err := count(record.Waiting, -moved); err != nil {
			return err
		}
		if err := count(record.Available, moved); err != nil {
			return err
		}
		err = events.ForEach(func(k, v []byte) error {
			ev, err := journal.DecodeEvent(v)
			if err != nil {
				return err
			}
			if ev.From != record.Waiting && ev.To != record.Waiting {
				return nil
			}
			if ev.From == record.Waiting {
				ev.From = record.Available
			}
			if ev.To == record.Waiting {
				ev.To = record.Available
			}
			return events.Put(k, journal.EncodeEvent(ev))
		})
		if err != nil {
			return err
		}
		return meta.Put([]byte("version"), []byte("4"))
	})
	ts.Check(err)
	ts.Check(b.Close())
	ts.Check(os.Remove(filepath.Join(root, "waiting")))
}
