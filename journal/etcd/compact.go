package etcd

import (
	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Compaction: the folded records and the dropping of events. etcd keeps
// the space of deleted keys until its own compaction and defrag give it
// back: the store has no Reclaim (journal.Reclaimer). fence's compact
// keeps each transaction inside what the server takes (--max-txn-ops, 128
// by default): it folds fewer tasks, and drops fewer events (DropEvents'
// limit), a commit while etcd refuses one as too large (ErrTooLarge).

// The folded records are P/f/ID (famFolded); P/k/TOKEN (famFoldedToken)
// names the task of each token whose claim DeleteClaim forgot; recover
// sets both aside with the other families. The count of dropped events is
// the meta key P/m/dropped (metaDropped), which begin reads with the
// others, guarded by the head's compare like the defaults.

// foldedVersion marks a journal that holds folded records: a fencectl
// that does not know them would rebuild the tasks from the log alone, in
// which they have no events, and lose them (replay), or read a folded
// task as unknown (show); it refuses the journal instead. The first Fold
// sets it, in the same commit. It is SchemaVersion with one family more,
// so it reads (and keeps) V2 records.
const foldedVersion = "etcd-3-compacted"

// Fold keeps rec as the folded record of task rec.ID, covering its events
// up to seq upTo.
func (t *Tx) Fold(rec record.Task, upTo uint64) error {
	t.wrote()
	if err := t.begin(); err != nil {
		return err
	}
	enc := journal.EncodeTask(rec)
	t.v2 = t.v2 || journal.IsV2(enc)
	t.folded = true
	t.put(t.key(famFolded, rec.ID), u64(upTo)+string(enc))
	t.headMod = true // every write moves the head (see PutDefaults)
	return nil
}

// Folded calls fn for every folded record, in id order.
func (t *Tx) Folded(fn func(f journal.FoldedRecord) (more bool, err error)) error {
	return t.scanPrefix(famFolded, func(k, v string) (bool, error) {
		f, err := journal.ParseFolded(k, []byte(v))
		if err != nil {
			return false, err
		}
		return fn(f)
	})
}

// FoldedTask returns the folded record of id, if it has one.
func (t *Tx) FoldedTask(id string) (record.Task, uint64, bool, error) {
	k := t.key(famFolded, id)
	kvs, err := t.get(k)
	if err != nil || kvs[k] == nil {
		return record.Task{}, 0, false, err
	}
	f, err := journal.ParseFolded(id, kvs[k].Value)
	if err != nil {
		return record.Task{}, 0, false, err
	}
	rec, err := f.Task()
	return rec, f.UpTo, err == nil, err
}

// DropEvents removes up to limit (0: all) of task id's events with seq at
// or below upTo, oldest first, and returns them, counted into Dropped in
// the same commit. The head's Seq is not touched: the next Append still
// gets a new seq.
func (t *Tx) DropEvents(id string, upTo uint64, limit int) ([]record.Event, error) {
	t.wrote()
	p := t.key(famByTask, id+"\x00")
	var seqs []string
	err := t.scan(p, rangeEnd(p), func(k, _ string) (bool, error) {
		seq := k[len(p):]
		if getU64(seq) > upTo || limit > 0 && len(seqs) == limit {
			return false, nil
		}
		seqs = append(seqs, seq)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	var dropped []record.Event
	for len(seqs) > 0 {
		n := min(len(seqs), 64) // etcd's default limit is 128 operations a request
		keys := make([]string, n)
		for i, s := range seqs[:n] {
			keys[i] = t.key(famEvent, s)
		}
		kvs, err := t.get(keys...)
		if err != nil {
			return dropped, err
		}
		for i, k := range keys {
			if kv := kvs[k]; kv != nil {
				ev, err := decodeEvent(k, string(kv.Value))
				if err != nil {
					return dropped, err
				}
				dropped = append(dropped, ev)
				t.del(k)
			}
			t.del(p + seqs[i])
		}
		seqs = seqs[n:]
	}
	if len(dropped) == 0 {
		return dropped, nil
	}
	enc, err := journal.AddDropped([]byte(t.meta[metaDropped]), dropped)
	if err != nil {
		return dropped, err
	}
	t.meta[metaDropped] = string(enc)
	t.put(t.key(famMeta, metaDropped), string(enc))
	t.headMod = true
	return dropped, nil
}

// Dropped returns how many events of each kind DropEvents has dropped.
func (t *Tx) Dropped() (map[journal.EventKind]uint64, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	return journal.DecodeDropped([]byte(t.meta[metaDropped]))
}

// DeleteClaim forgets the claim of token, keeping its task's id.
func (t *Tx) DeleteClaim(token uint64, task string) error {
	t.wrote()
	if err := t.begin(); err != nil {
		return err
	}
	t.put(t.key(famFoldedToken, u64(token)), task)
	t.del(t.key(famClaim, u64(token)))
	t.headMod = true
	return nil
}

// FoldedToken returns the task of a token whose claim DeleteClaim forgot.
func (t *Tx) FoldedToken(token uint64) (string, bool, error) {
	k := t.key(famFoldedToken, u64(token))
	kvs, err := t.get(k)
	if err != nil || kvs[k] == nil {
		return "", false, err
	}
	return string(kvs[k].Value), true, nil
}
