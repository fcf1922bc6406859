package etcd

import (
	"fmt"
	"slices"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Append adds ev to the log with the next sequence number (from the head:
// one order across every host) and returns it as stored.
func (t *Tx) Append(ev record.Event) (record.Event, error) {
	t.wrote()
	if err := t.begin(); err != nil {
		return ev, err
	}
	t.head.Seq++
	ev.Seq = t.head.Seq
	enc := journal.EncodeEvent(ev)
	t.v2 = t.v2 || journal.IsV2(enc)
	t.put(t.key(famEvent, u64(ev.Seq)), string(enc))
	t.put(t.key(famByTask, ev.Task+"\x00"+u64(ev.Seq)), "")
	if t.first == 0 {
		t.first = ev.Seq
	}
	t.head.First, t.head.Last, t.headMod = t.first, ev.Seq, true
	return ev, nil
}

// LastCommit returns the events of the most recent write transaction that
// appended any.
func (t *Tx) LastCommit() ([]record.Event, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	if t.head.First == 0 {
		return nil, nil
	}
	var evs []record.Event
	err := t.Events(t.head.First, func(ev record.Event) (bool, error) {
		evs = append(evs, ev)
		return ev.Seq < t.head.Last, nil
	})
	return evs, err
}

// Events calls fn for each event from seq from on, in order, while fn
// returns true.
func (t *Tx) Events(from uint64, fn func(record.Event) (more bool, err error)) error {
	lo := t.key(famEvent, u64(from))
	return t.scan(lo, rangeEnd(t.key(famEvent, "")), func(k, v string) (bool, error) {
		ev, err := decodeEvent(k, v)
		if err != nil {
			return false, err
		}
		return fn(ev)
	})
}

// EventsBackward calls fn for each event from the newest back, a window
// of sequence numbers at a time (etcd reads ranges forward only cheaply).
func (t *Tx) EventsBackward(fn func(record.Event) (more bool, err error)) error {
	if err := t.begin(); err != nil {
		return err
	}
	for hi := t.head.Seq; hi > 0; {
		lo := uint64(1)
		if hi > pageSize {
			lo = hi - pageSize + 1
		}
		var page []record.Event
		err := t.scan(t.key(famEvent, u64(lo)), t.key(famEvent, u64(hi+1)), func(k, v string) (bool, error) {
			ev, err := decodeEvent(k, v)
			page = append(page, ev)
			return true, err
		})
		if err != nil {
			return err
		}
		for i := len(page) - 1; i >= 0; i-- {
			if more, err := fn(page[i]); err != nil || !more {
				return err
			}
		}
		hi = lo - 1
	}
	return nil
}

// TaskEventsBackward calls fn for each event of task id from the newest
// back, reading only that task's events: the newest first on its own
// (most callers want only that one, and in a write every event read is a
// check of the commit, which etcd bounds by --max-txn-ops), then 64 a
// request.
func (t *Tx) TaskEventsBackward(id string, fn func(record.Event) (more bool, err error)) error {
	var seqs []string
	p := t.key(famByTask, id+"\x00")
	err := t.scan(p, rangeEnd(p), func(k, _ string) (bool, error) {
		seqs = append(seqs, k[len(p):])
		return true, nil
	})
	if err != nil {
		return err
	}
	slices.Reverse(seqs)
	for batch := 1; len(seqs) > 0; batch = 64 { // etcd's default limit is 128 operations a request
		n := min(len(seqs), batch)
		keys := make([]string, n)
		for i, s := range seqs[:n] {
			keys[i] = t.key(famEvent, s)
		}
		kvs, err := t.get(keys...)
		if err != nil {
			return err
		}
		for i, k := range keys {
			var v string
			if kv := kvs[k]; kv != nil {
				v = string(kv.Value)
			}
			ev, err := decodeEvent(seqs[i], v)
			if err != nil {
				return err
			}
			if more, err := fn(ev); err != nil || !more {
				return err
			}
		}
		seqs = seqs[n:]
	}
	return nil
}

func decodeEvent(k, v string) (record.Event, error) {
	ev, err := journal.DecodeEvent([]byte(v))
	if err != nil {
		return ev, fmt.Errorf("decode event %d: %w", getU64(k[len(k)-8:]), err)
	}
	return ev, nil
}
