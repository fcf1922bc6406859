package bolt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Compaction: the folded records, the dropping of events, and the rewrite
// of the file that gives their pages back.

// bucketFolded holds the folded records: key the task id, value the seq of
// the last event the fold covers (8 bytes, big-endian), then the record
// (journal.EncodeTask). Made on first use.
var bucketFolded = []byte("folded")

// bucketFoldedTokens maps the token of every claim DeleteClaim forgot
// (8 bytes, big-endian) to the id of its task. Made on first use.
var bucketFoldedTokens = []byte("folded_tokens")

// keyDropped is the meta key of the count of dropped events
// (journal.EncodeDropped); absent until the first DropEvents.
const keyDropped = "dropped"

// foldedVersion marks a journal that holds folded records: a fencectl
// that does not know them would rebuild the tasks from the log alone, in
// which they have no events, and lose them; it refuses the journal
// instead. Set by the first Fold; read (and written) by this one. Not a
// number: it is schema 5 with one bucket more, and a future schema 6
// decides for itself how it reads folded records.
const foldedVersion = "5-compacted"

// reclaimSuffix marks the new file a Reclaim writes before it renames it
// over the journal; what a crash left of one is removed by the next.
const reclaimSuffix = ".compacting-"

// reclaimTxSize bounds each transaction of the copy, so that copying a
// journal of a million tasks does not hold it all in memory at once.
const reclaimTxSize = 64 << 20

// Fold keeps rec as the folded record of task rec.ID, covering its events
// up to seq upTo.
func (t *Tx) Fold(rec record.Task, upTo uint64) error {
	t.wrote()
	b, err := t.bucket(bucketFolded, true)
	if err != nil {
		return err
	}
	t.folded = true
	return b.Put([]byte(rec.ID), append(u64(upTo), journal.EncodeTask(rec)...))
}

// Folded calls fn for every folded record, in id order.
func (t *Tx) Folded(fn func(f journal.FoldedRecord) (more bool, err error)) error {
	b := t.tx.Bucket(bucketFolded)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		f, err := journal.ParseFolded(string(k), v)
		if err != nil {
			return err
		}
		if more, err := fn(f); err != nil || !more {
			return err
		}
	}
	return nil
}

// FoldedTask returns the folded record of id, if it has one.
func (t *Tx) FoldedTask(id string) (record.Task, uint64, bool, error) {
	b := t.tx.Bucket(bucketFolded)
	if b == nil {
		return record.Task{}, 0, false, nil
	}
	v := b.Get([]byte(id))
	if v == nil {
		return record.Task{}, 0, false, nil
	}
	f, err := journal.ParseFolded(id, v)
	if err != nil {
		return record.Task{}, 0, false, err
	}
	rec, err := f.Task()
	return rec, f.UpTo, err == nil, err
}

// DropEvents removes up to limit (0: all) of task id's events with seq at
// or below upTo, oldest first, and returns them, counted into Dropped in
// the same transaction. The events bucket's sequence is bbolt's own
// counter, which deleting keys never lowers: the next Append still gets a
// new seq.
func (t *Tx) DropEvents(id string, upTo uint64, limit int) ([]record.Event, error) {
	t.wrote()
	events := t.tx.Bucket(bucketEvents)
	idx := t.tx.Bucket(bucketByTask)
	prefix := append([]byte(id), 0)
	var keys [][]byte
	c := idx.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if getU64(k[len(prefix):]) > upTo || limit > 0 && len(keys) == limit {
			break
		}
		keys = append(keys, append([]byte(nil), k...))
	}
	dropped := make([]record.Event, 0, len(keys))
	for _, k := range keys {
		seq := k[len(prefix):]
		if v := events.Get(seq); v != nil {
			ev, err := decodeEvent(seq, v)
			if err != nil {
				return dropped, err
			}
			dropped = append(dropped, ev)
			if err := events.Delete(seq); err != nil {
				return dropped, err
			}
		}
		if err := idx.Delete(k); err != nil {
			return dropped, err
		}
	}
	if len(dropped) == 0 {
		return dropped, nil
	}
	return dropped, t.countDropped(dropped)
}

// countDropped adds evs to the count of dropped events.
func (t *Tx) countDropped(evs []record.Event) error {
	meta := t.tx.Bucket(bucketMeta)
	enc, err := journal.AddDropped(meta.Get([]byte(keyDropped)), evs)
	if err != nil {
		return err
	}
	return meta.Put([]byte(keyDropped), enc)
}

// Dropped returns how many events of each kind DropEvents has dropped.
func (t *Tx) Dropped() (map[journal.EventKind]uint64, error) {
	return journal.DecodeDropped(t.tx.Bucket(bucketMeta).Get([]byte(keyDropped)))
}

// DeleteClaim forgets the claim of token, keeping its task's id.
func (t *Tx) DeleteClaim(token uint64, task string) error {
	t.wrote()
	b, err := t.bucket(bucketFoldedTokens, true)
	if err != nil {
		return err
	}
	if err := b.Put(u64(token), []byte(task)); err != nil {
		return err
	}
	return t.tx.Bucket(bucketClaims).Delete(u64(token))
}

// FoldedToken returns the task of a token whose claim DeleteClaim forgot.
func (t *Tx) FoldedToken(token uint64) (string, bool, error) {
	b := t.tx.Bucket(bucketFoldedTokens)
	if b == nil {
		return "", false, nil
	}
	v := b.Get(u64(token))
	return string(v), v != nil, nil
}

// Reclaim rewrites the journal into a new file that holds only what is
// live (bbolt.Compact: every bucket, its keys and its sequence, pages
// filled), fsyncs it, renames it over the journal and fsyncs the
// directory; then the handle goes on with the new file. bbolt never
// shrinks a file: the pages of dropped records go to its freelist, and
// only a copy gives them back to the file system.
//
// A crash before the rename leaves the old journal (and a stray new file,
// removed by the next Reclaim); after it, the new one, complete and
// synced. The handle holds .fence/lock and bbolt's lock throughout, so no
// other process reads or writes meanwhile. A parked handle of another
// process finds another file at Resume and opens the new one;
// a watcher hears the old file's link count change and watches the new
// one (see Watcher).
func (db *DB) Reclaim(o journal.ReclaimOptions) (res journal.ReclaimResult, err error) {
	crash := o.Crash
	if crash == nil {
		crash = func(string) {}
	}
	if db.readOnly || db.parked != nil {
		return res, fmt.Errorf("reclaim journal %s: the handle does not hold the writer's turn", db.path)
	}
	defer guard(db.path, &err)()
	dir := filepath.Dir(db.path)
	sweepReclaims(dir)
	if fi, err := os.Stat(db.path); err == nil {
		res.Before = fi.Size()
	}
	tmp := fmt.Sprintf("%s%s%d-%d", db.path, reclaimSuffix, os.Getpid(), time.Now().UnixNano())
	dst, err := bbolt.Open(tmp, 0o600, &bbolt.Options{Timeout: time.Second, NoSync: true, FreelistType: bbolt.FreelistMapType, OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
		return os.OpenFile(name, flag|os.O_EXCL, mode)
	}})
	if err != nil {
		_ = os.Remove(tmp) // a full disk leaves it made and empty
		return res, fmt.Errorf("reclaim journal %s: %w", db.path, err)
	}
	err = bbolt.Compact(dst, db.b, reclaimTxSize)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsyncPath(tmp)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return res, fmt.Errorf("reclaim journal %s: copy: %w", db.path, err)
	}
	crash("compact:after-copy")
	if err := os.Rename(tmp, db.path); err != nil {
		_ = os.Remove(tmp)
		return res, fmt.Errorf("reclaim journal %s: rename the copy into place: %w", db.path, err)
	}
	crash("compact:after-rename")
	if err := fsyncPath(dir); err != nil {
		return res, fmt.Errorf("reclaim journal %s: sync %s: %w", db.path, dir, err)
	}
	if fi, err := os.Stat(db.path); err == nil {
		res.After = fi.Size()
	}
	if err := db.reopen(time.Second); err != nil {
		return res, fmt.Errorf("reopen journal %s after compaction: %w", db.path, err)
	}
	return res, nil
}

// sweepReclaims removes the copies that a Reclaim killed before its
// rename left in dir. Only under the writer's lock, which every Reclaim
// holds.
func sweepReclaims(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, FileName+reclaimSuffix+"*"))
	for _, n := range names {
		_ = os.Remove(n)
	}
}
