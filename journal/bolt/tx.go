package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Tx is one journal transaction. Methods that change state may only be
// called inside DB.Update.
type Tx struct {
	tx *bbolt.Tx
	// clock and now answer Now: read once, on first use, so that every
	// call in one transaction sees the same time.
	clock func() time.Time
	now   time.Time
	dir   string // the journal's directory: where the token ceiling is (ceiling.go)
	// witnessAt points at its DB's: when the newest witness the ceiling
	// files are known to hold was written (zero: not read since the handle
	// was opened). witness is the one to record after the commit, if due.
	witnessAt  *time.Time
	witness    *journal.Witness
	ceilings   *journal.CeilingCache // its DB's (LostTokens)
	firstEvent uint64                // seq of this transaction's first appended event, 0 if none
	lastEvent  uint64
	// writes counts the calls of methods that change state, made or
	// attempted (a failed Put counts: it may have changed a page). Every
	// such method calls wrote first, so that Writes can tell a caller
	// sharing one transaction among several operations (fence's group
	// commit) whether an operation that failed left anything behind.
	writes int
	// v2 is set once the transaction wrote a record only a version 4
	// reader reads (journal.IsV2): Update raises the schema version.
	v2 bool
	// folded is set once the transaction folded a task (Fold): Update
	// marks the journal foldedVersion.
	folded bool
}

var (
	_ journal.Tx    = (*Tx)(nil)
	_ journal.Store = (*DB)(nil)
)

// Now returns the time lease expiry is judged by: bbolt has no clock, so
// the local one (OpenOptions.Clock), read at the first call.
func (t *Tx) Now() time.Time {
	if t.now.IsZero() {
		t.now = t.clock()
	}
	return t.now
}

// wrote counts one state change; every method that writes calls it first.
func (t *Tx) wrote() { t.writes++ }

// Writes returns how many state-changing calls this transaction has made
// so far. An operation that fails with Writes unchanged left the
// transaction as it found it; one that changed it must not commit.
func (t *Tx) Writes() int { return t.writes }

// Confirm returns nil: a bbolt transaction holds the writer's lock, so
// nothing it read can change under it.
func (t *Tx) Confirm() error { return nil }

// Task returns the record of id; ok is false if the journal does not know it.
func (t *Tx) Task(id string) (task record.Task, ok bool, err error) {
	v := t.tx.Bucket(bucketTasks).Get([]byte(id))
	if v == nil {
		return record.Task{}, false, nil
	}
	task, err = journal.DecodeTask(v)
	if err != nil {
		return record.Task{}, false, fmt.Errorf("decode task %q: %w", id, err)
	}
	return task, true, nil
}

// PutTask stores rec and keeps the ready and expiry indexes and the
// per-state counts in step. old is the record it replaces (nil for a new
// task); passing it saves a read and keeps index maintenance exact.
func (t *Tx) PutTask(old *record.Task, rec record.Task) error {
	t.wrote()
	if old != nil {
		if err := t.unindex(*old); err != nil {
			return err
		}
		if err := t.addCount(old.State, -1); err != nil {
			return err
		}
	}
	enc := journal.EncodeTask(rec)
	t.v2 = t.v2 || journal.IsV2(enc)
	if err := t.tx.Bucket(bucketTasks).Put([]byte(rec.ID), enc); err != nil {
		return err
	}
	if err := t.index(rec); err != nil {
		return err
	}
	return t.addCount(rec.State, +1)
}

func (t *Tx) index(rec record.Task) error {
	if err := t.indexDeps(rec, true); err != nil {
		return err
	}
	if err := t.indexDue(rec, true); err != nil {
		return err
	}
	switch {
	case rec.Ready():
		if err := t.indexLabels(rec, true); err != nil {
			return err
		}
		return t.tx.Bucket(bucketReady).Put(readyKey(rec.Priority, rec.Seq), []byte(rec.ID))
	case rec.Blocked():
		return t.addMeta(keyBlocked, +1)
	case rec.State == record.Claimed && rec.Lease != nil:
		return t.tx.Bucket(bucketExpiry).Put(expiryKey(rec.Lease.Deadline, rec.Lease.Token), []byte(rec.ID))
	}
	return nil
}

func (t *Tx) unindex(rec record.Task) error {
	if err := t.indexDeps(rec, false); err != nil {
		return err
	}
	if err := t.indexDue(rec, false); err != nil {
		return err
	}
	switch {
	case rec.Ready():
		if err := t.indexLabels(rec, false); err != nil {
			return err
		}
		return t.tx.Bucket(bucketReady).Delete(readyKey(rec.Priority, rec.Seq))
	case rec.Blocked():
		return t.addMeta(keyBlocked, -1)
	case rec.State == record.Claimed && rec.Lease != nil:
		return t.tx.Bucket(bucketExpiry).Delete(expiryKey(rec.Lease.Deadline, rec.Lease.Token))
	}
	return nil
}

// bucket returns the bucket name, made if add and missing (the buckets of
// schema 4 are made on first use); nil if absent and not add.
func (t *Tx) bucket(name []byte, add bool) (*bbolt.Bucket, error) {
	if b := t.tx.Bucket(name); b != nil || !add {
		return b, nil
	}
	return t.tx.CreateBucket(name)
}

// indexDeps puts (add) or deletes the dependents entries of rec.
func (t *Tx) indexDeps(rec record.Task, add bool) error {
	if len(rec.After) == 0 {
		return nil
	}
	b, err := t.bucket(bucketDependents, add)
	if err != nil || b == nil {
		return err
	}
	for _, dep := range rec.After {
		if add {
			err = b.Put(pairKey(dep, rec.ID), nil)
		} else {
			err = b.Delete(pairKey(dep, rec.ID))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// indexDue puts (add) or deletes the due index entry of rec, if it is a
// task that waits for a time only.
func (t *Tx) indexDue(rec record.Task, add bool) error {
	if !rec.Scheduled() {
		return nil
	}
	b, err := t.bucket(bucketDue, add)
	if err != nil || b == nil {
		return err
	}
	if add {
		return b.Put(expiryKey(rec.NotBefore, rec.Seq), []byte(rec.ID))
	}
	return b.Delete(expiryKey(rec.NotBefore, rec.Seq))
}

// Scheduled calls fn with the waiting tasks that wait for a time only,
// earliest NotBefore first, until fn returns false: it reads only as far
// as fn goes.
func (t *Tx) Scheduled(fn func(id string, at time.Time) (more bool)) error {
	b := t.tx.Bucket(bucketDue)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if !fn(string(v), keyTime(k)) {
			return nil
		}
	}
	return nil
}

// indexLabels puts (add) or deletes the per-label ready entries of rec.
func (t *Tx) indexLabels(rec record.Task, add bool) error {
	if len(rec.Labels) == 0 {
		return nil
	}
	b, err := t.bucket(bucketLabels, add)
	if err != nil || b == nil {
		return err
	}
	for _, l := range rec.Labels {
		if add {
			err = b.Put(labelKey(l, rec.Priority, rec.Seq), []byte(rec.ID))
		} else {
			err = b.Delete(labelKey(l, rec.Priority, rec.Seq))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *Tx) addMeta(key string, d int64) error {
	meta := t.tx.Bucket(bucketMeta)
	n := int64(getU64(meta.Get([]byte(key)))) + d
	if n == 0 {
		return meta.Delete([]byte(key))
	}
	return meta.Put([]byte(key), u64(uint64(n)))
}

// Blocked returns how many available tasks wait for others, in O(1).
func (t *Tx) Blocked() int {
	return int(int64(getU64(t.tx.Bucket(bucketMeta).Get([]byte(keyBlocked)))))
}

// Dependents calls fn with the ids of the tasks whose After holds dep, in
// id order, until fn returns false. It reads only dep's entries.
func (t *Tx) Dependents(dep string, fn func(id string) (more bool)) error {
	b := t.tx.Bucket(bucketDependents)
	if b == nil {
		return nil
	}
	p := pairKey(dep, "")
	c := b.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if !fn(string(k[len(p):])) {
			return nil
		}
	}
	return nil
}

// Dependencies calls fn for every entry of the dependents index, by
// dependency then dependent, until fn returns false.
func (t *Tx) Dependencies(fn func(dep, id string) (more bool)) error {
	b := t.tx.Bucket(bucketDependents)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			return fmt.Errorf("dependents index: key %q has no separator", k)
		}
		if !fn(string(k[:i]), string(k[i+1:])) {
			return nil
		}
	}
	return nil
}

// ReadyLabel calls fn with the ids of ready tasks that carry label, in
// claim order, until fn returns false. It reads only label's entries.
func (t *Tx) ReadyLabel(label string, fn func(id string) (more bool)) {
	b := t.tx.Bucket(bucketLabels)
	if b == nil {
		return
	}
	p := pairKey(label, "")
	c := b.Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p) && fn(string(v)); k, v = c.Next() {
	}
}

func (t *Tx) addCount(s record.State, d int64) error {
	meta := t.tx.Bucket(bucketMeta)
	k := []byte(keyCountPfx + string(s))
	n := int64(getU64(meta.Get(k))) + d
	return meta.Put(k, u64(uint64(n)))
}

// Counts returns how many tasks are in each state, in O(1).
func (t *Tx) Counts() map[record.State]int {
	meta := t.tx.Bucket(bucketMeta)
	c := make(map[record.State]int, len(record.States))
	for _, s := range record.States {
		c[s] = int(int64(getU64(meta.Get([]byte(keyCountPfx + string(s))))))
	}
	return c
}

// Ready calls fn with the ids of available tasks in claim order (highest
// priority, then oldest) until fn returns false.
func (t *Tx) Ready(fn func(id string) (more bool)) {
	c := t.tx.Bucket(bucketReady).Cursor()
	for k, v := c.First(); k != nil && fn(string(v)); k, v = c.Next() {
	}
}

// ReadyHeads calls fn with the first ready task of each priority, in
// claim order, until fn returns false (journal.ReadyHeads): a seek per
// priority, whatever the index holds.
func (t *Tx) ReadyHeads(fn func(id string) (more bool)) {
	c := t.tx.Bucket(bucketReady).Cursor()
	for k, v := c.First(); k != nil && len(k) >= 8 && fn(string(v)); {
		next := binary.BigEndian.Uint64(k[:8]) + 1
		if next == 0 {
			return // the lowest priority there is
		}
		k, v = c.Seek(binary.BigEndian.AppendUint64(nil, next))
	}
}

// Expired returns the ids of claimed tasks whose deadline is at or before
// now, oldest deadline first. It reads only the expired part of the index.
func (t *Tx) Expired(now time.Time) []string {
	var ids []string
	limit := expiryKey(now, ^uint64(0))
	c := t.tx.Bucket(bucketExpiry).Cursor()
	for k, v := c.First(); k != nil && bytes.Compare(k, limit) <= 0; k, v = c.Next() {
		ids = append(ids, string(v))
	}
	return ids
}

// Leases calls fn for every claimed task's id in deadline order.
func (t *Tx) Leases(fn func(id string) error) error {
	return t.tx.Bucket(bucketExpiry).ForEach(func(_, v []byte) error { return fn(string(v)) })
}

// ForEachTask calls fn for every record, in id order.
func (t *Tx) ForEachTask(fn func(record.Task) error) error {
	return t.tx.Bucket(bucketTasks).ForEach(func(k, v []byte) error {
		rec, err := journal.DecodeTask(v)
		if err != nil {
			return fmt.Errorf("decode task %q: %w", k, err)
		}
		return fn(rec)
	})
}

// TasksFrom calls fn for each record whose id sorts after after, in id
// order, from a cursor seek: it reads only what fn consumes.
func (t *Tx) TasksFrom(after string, fn func(record.Task) (more bool, err error)) error {
	c := t.tx.Bucket(bucketTasks).Cursor()
	k, v := c.First()
	if after != "" {
		k, v = c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, v = c.Next()
		}
	}
	for ; k != nil; k, v = c.Next() {
		rec, err := journal.DecodeTask(v)
		if err != nil {
			return fmt.Errorf("decode task %q: %w", k, err)
		}
		if more, err := fn(rec); err != nil || !more {
			return err
		}
	}
	return nil
}

// NextToken issues a fencing token: max(counter+1, now in µs), kept below
// the durable token ceiling (ceiling.go) and stored back as the new
// counter. See the package doc for why the clock takes part.
func (t *Tx) NextToken(now time.Time) (uint64, error) {
	t.wrote()
	meta := t.tx.Bucket(bucketMeta)
	next := getU64(meta.Get([]byte(keyToken))) + 1
	if clock := uint64(now.UnixMicro()); clock > next {
		next = clock
	}
	next, err := t.reserve(next)
	if err != nil {
		return 0, err
	}
	return next, meta.Put([]byte(keyToken), u64(next))
}

// LastToken returns the highest token ever issued (or the seed).
func (t *Tx) LastToken() uint64 {
	return getU64(t.tx.Bucket(bucketMeta).Get([]byte(keyToken)))
}

// Claim returns what the journal remembers of token.
func (t *Tx) Claim(token uint64) (c record.Claim, ok bool, err error) {
	v := t.tx.Bucket(bucketClaims).Get(u64(token))
	if v == nil {
		return record.Claim{}, false, nil
	}
	c, err = journal.DecodeClaim(v)
	if err != nil {
		return record.Claim{}, false, fmt.Errorf("decode claim %d: %w", token, err)
	}
	return c, true, nil
}

// PutClaim stores c under its token.
func (t *Tx) PutClaim(c record.Claim) error {
	t.wrote()
	return t.tx.Bucket(bucketClaims).Put(u64(c.Token), journal.EncodeClaim(c))
}

// Request returns the token of the current claim granted to request id
// of agent, if any.
func (t *Tx) Request(agent, id string) (uint64, bool) {
	b := t.tx.Bucket(bucketRequests)
	if b == nil {
		return 0, false
	}
	v := b.Get(requestKey(agent, id))
	return getU64(v), v != nil
}

// PutRequest records that request id of agent was granted token.
func (t *Tx) PutRequest(agent, id string, token uint64) error {
	t.wrote()
	b, err := t.tx.CreateBucketIfNotExists(bucketRequests)
	if err != nil {
		return err
	}
	return b.Put(requestKey(agent, id), u64(token))
}

// DeleteRequest forgets request id of agent (its claim ended).
func (t *Tx) DeleteRequest(agent, id string) error {
	t.wrote()
	b := t.tx.Bucket(bucketRequests)
	if b == nil {
		return nil
	}
	return b.Delete(requestKey(agent, id))
}

// Defaults returns the tree-wide settings chosen at init.
func (t *Tx) Defaults() (record.Defaults, error) {
	d, err := journal.DecodeDefaults(t.tx.Bucket(bucketMeta).Get([]byte(keyDefaults)))
	if err != nil {
		return d, fmt.Errorf("decode defaults: %w", err)
	}
	return d, nil
}

// PutDefaults replaces the tree-wide settings.
func (t *Tx) PutDefaults(d record.Defaults) error {
	t.wrote()
	enc := journal.EncodeDefaults(d)
	t.v2 = t.v2 || journal.IsV2(enc)
	return t.tx.Bucket(bucketMeta).Put([]byte(keyDefaults), enc)
}

// Reset empties every derived bucket (tasks, indexes, claims, requests,
// counts) so
// that replay can write them afresh from the event log. Events and the
// token counter are kept.
func (t *Tx) Reset() error {
	t.wrote()
	if t.tx.Bucket(bucketRequests) != nil {
		if err := t.tx.DeleteBucket(bucketRequests); err != nil {
			return err
		}
	}
	for _, name := range [][]byte{bucketDependents, bucketLabels, bucketDue} {
		if t.tx.Bucket(name) != nil {
			if err := t.tx.DeleteBucket(name); err != nil {
				return err
			}
		}
	}
	if err := t.tx.Bucket(bucketMeta).Delete([]byte(keyBlocked)); err != nil {
		return err
	}
	for _, name := range [][]byte{bucketTasks, bucketReady, bucketExpiry, bucketClaims} {
		if err := t.tx.DeleteBucket(name); err != nil {
			return err
		}
		if _, err := t.tx.CreateBucket(name); err != nil {
			return err
		}
	}
	meta := t.tx.Bucket(bucketMeta)
	for _, s := range record.States {
		if err := meta.Delete([]byte(keyCountPfx + string(s))); err != nil {
			return err
		}
	}
	return nil
}

// Check runs bbolt's own consistency check and returns its findings.
func (t *Tx) Check() []error {
	var errs []error
	for err := range t.tx.Check() {
		errs = append(errs, err)
	}
	return errs
}

// IndexSizes returns how many entries the ready and expiry indexes hold,
// for replay's check that they match the records.
func (t *Tx) IndexSizes() (ready, expiry int) {
	return t.tx.Bucket(bucketReady).Stats().KeyN, t.tx.Bucket(bucketExpiry).Stats().KeyN
}

// ForEachClaim calls fn for every stored claim, in token order.
func (t *Tx) ForEachClaim(fn func(record.Claim) error) error {
	return t.tx.Bucket(bucketClaims).ForEach(func(k, v []byte) error {
		c, err := journal.DecodeClaim(v)
		if err != nil {
			return fmt.Errorf("decode claim %d: %w", getU64(k), err)
		}
		return fn(c)
	})
}
