package bolt

import (
	"bytes"
	"fmt"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Append adds ev to the log with the next sequence number and returns it
// as stored. The first and last seq of the transaction are recorded at
// commit, so the next opener can check that the last commit reached the
// tree.
func (t *Tx) Append(ev record.Event) (record.Event, error) {
	t.wrote()
	b := t.tx.Bucket(bucketEvents)
	seq, err := b.NextSequence()
	if err != nil {
		return ev, err
	}
	ev.Seq = seq
	enc := journal.EncodeEvent(ev)
	t.v2 = t.v2 || journal.IsV2(enc)
	if err := b.Put(u64(seq), enc); err != nil {
		return ev, err
	}
	if err := t.tx.Bucket(bucketByTask).Put(byTaskKey(ev.Task, seq), nil); err != nil {
		return ev, err
	}
	if t.firstEvent == 0 {
		t.firstEvent = seq
	}
	t.lastEvent = seq
	return ev, nil
}

// finish records the range of events this transaction appended.
func (t *Tx) finish() error {
	if t.firstEvent == 0 {
		return nil
	}
	v := append(u64(t.firstEvent), u64(t.lastEvent)...)
	return t.tx.Bucket(bucketMeta).Put([]byte(keyLastCommit), v)
}

// LastCommit returns the events of the most recent write transaction that
// appended any: the only ones that can still be missing from the tree after
// a crash, since writers are serialised by the lock.
func (t *Tx) LastCommit() ([]record.Event, error) {
	v := t.tx.Bucket(bucketMeta).Get([]byte(keyLastCommit))
	if len(v) != 16 {
		return nil, nil
	}
	var evs []record.Event
	err := t.Events(getU64(v[:8]), func(ev record.Event) (bool, error) {
		evs = append(evs, ev)
		return ev.Seq < getU64(v[8:]), nil
	})
	return evs, err
}

// Events calls fn for each event from seq from on, in order, while fn
// returns true.
func (t *Tx) Events(from uint64, fn func(record.Event) (more bool, err error)) error {
	c := t.tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Seek(u64(from)); k != nil; k, v = c.Next() {
		ev, err := decodeEvent(k, v)
		if err != nil {
			return err
		}
		more, err := fn(ev)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// EventsBackward calls fn for each event from the newest back, while fn
// returns true. `log --limit` and `show` read the tail this way.
func (t *Tx) EventsBackward(fn func(record.Event) (more bool, err error)) error {
	c := t.tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Last(); k != nil; k, v = c.Prev() {
		ev, err := decodeEvent(k, v)
		if err != nil {
			return err
		}
		more, err := fn(ev)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// TaskEventsBackward calls fn for each event of task id from the newest
// back, while fn returns true. It reads only that task's events.
func (t *Tx) TaskEventsBackward(id string, fn func(record.Event) (more bool, err error)) error {
	events := t.tx.Bucket(bucketEvents)
	c := t.tx.Bucket(bucketByTask).Cursor()
	prefix := append([]byte(id), 0)
	k, _ := c.Seek(byTaskKey(id, ^uint64(0)))
	if k == nil {
		k, _ = c.Last()
	} else if !bytes.Equal(k, byTaskKey(id, ^uint64(0))) {
		k, _ = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Prev() {
		seq := k[len(prefix):]
		ev, err := decodeEvent(seq, events.Get(seq))
		if err != nil {
			return err
		}
		more, err := fn(ev)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// decodeEvent decodes the event stored under key k.
func decodeEvent(k, v []byte) (record.Event, error) {
	ev, err := journal.DecodeEvent(v)
	if err != nil {
		return ev, fmt.Errorf("decode event %d: %w", getU64(k), err)
	}
	return ev, nil
}
