package journal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fencectl/fencectl/journal/record"
)

// Record encoding.
//
// Task records, claims, events and the defaults are written in a compact
// binary form:
// one version byte (codecV1), then the fields in a fixed order, integers as
// varints, strings length-prefixed, times as UTC instants. A claim decodes
// and encodes four or five records, and with encoding/json that was half of
// the work a group commit does per operation, plus, in every new process,
// the reflection that builds json's type tables.
//
// Journals written before this encoding hold JSON records, which always
// start with '{'. Decoding looks at the first byte and reads either, so
// old journals keep working and are converted record by record as tasks
// change; nothing needs a migration.
//
// Times are stored as instants in UTC (every time the journal records comes
// from the tree's clock, UTC by default); decoding returns them in UTC.

// codecV1 starts every binary record. It can never start a JSON record.
const codecV1 = 0x01

// codecV2 starts a task record or an event that carries the fields added
// after V1 (After, Labels, NotBefore): the V1 fields, then those. A record
// whose new fields are all empty is still written as V1, so a tree that
// uses none of them stays readable by a fencectl that knows only V1; a
// store raises its schema version with the first V2 record it writes
// (IsV2), so that such a fencectl then refuses the tree rather than
// misread it.
const codecV2 = 0x02

// codecV3 starts an event that carries a tree's defaults (a defaults
// event): the codecV2 fields, then the defaults.
const codecV3 = 0x03

// IsV2 reports whether an encoded record needs a reader that knows
// codecV2 (or later): a store raises its schema version when it writes
// one.
func IsV2(b []byte) bool { return len(b) > 0 && (b[0] == codecV2 || b[0] == codecV3) }

// errTrailing and errShort are the decoder's two ways to find a damaged record.
var (
	errShort    = errors.New("record truncated")
	errTrailing = errors.New("unexpected bytes after the record")
)

// ---- encoding

type encoder struct{ b []byte }

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) str(s string)  { e.uint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) flag(ok bool)  { e.b = append(e.b, boolByte(ok)) }
func (e *encoder) time(t time.Time) {
	// Zero stays zero; everything else as seconds and nanoseconds, which
	// covers every year time.Time can hold (UnixNano stops at 2262).
	if t.IsZero() {
		e.b = append(e.b, 0)
		return
	}
	e.b = append(e.b, 1)
	e.int(t.Unix())
	e.uint(uint64(t.Nanosecond()))
}

func boolByte(ok bool) byte {
	if ok {
		return 1
	}
	return 0
}

func (e *encoder) strs(ss []string) {
	e.uint(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

// ext writes the fields codecV2 adds.
func (e *encoder) ext(after, labels []string, notBefore time.Time) {
	e.strs(after)
	e.strs(labels)
	e.time(notBefore)
}

// version is the version byte of a record with these new fields.
func version(after, labels []string, notBefore time.Time) byte {
	if len(after) == 0 && len(labels) == 0 && notBefore.IsZero() {
		return codecV1
	}
	return codecV2
}

func (e *encoder) leaseEnd(l *record.LeaseEnd) {
	e.uint(l.Token)
	e.str(l.Agent)
	e.time(l.At)
	e.str(string(l.By))
	e.str(l.Reason)
}

// EncodeTask, EncodeClaim, EncodeEvent and EncodeDefaults write a record in
// the binary form every backend stores; the Decode functions read it back
// (and the JSON records of older journals).
func EncodeTask(t record.Task) []byte {
	e := encoder{b: make([]byte, 0, 128)}
	v := version(t.After, t.Labels, t.NotBefore)
	e.b = append(e.b, v)
	e.str(t.ID)
	e.str(string(t.State))
	e.int(t.Priority)
	e.int(int64(t.MaxAttempts))
	e.int(int64(t.Attempts))
	e.uint(t.Seq)
	e.time(t.Created)
	e.time(t.Updated)
	e.flag(t.Lease != nil)
	if l := t.Lease; l != nil {
		e.uint(l.Token)
		e.str(l.Agent)
		e.time(l.ClaimedAt)
		e.time(l.Deadline)
		e.int(int64(l.TTL))
		e.str(l.RequestID)
	}
	e.flag(t.Last != nil)
	if t.Last != nil {
		e.leaseEnd(t.Last)
	}
	if v == codecV2 {
		e.ext(t.After, t.Labels, t.NotBefore)
	}
	return e.b
}

// EncodeClaim writes a claim record (see EncodeTask).
func EncodeClaim(c record.Claim) []byte {
	e := encoder{b: make([]byte, 0, 96)}
	e.b = append(e.b, codecV1)
	e.uint(c.Token)
	e.str(c.Task)
	e.str(c.Agent)
	e.time(c.At)
	e.str(c.RequestID)
	e.flag(c.Ended != nil)
	if c.Ended != nil {
		e.leaseEnd(c.Ended)
	}
	return e.b
}

// EncodeEvent writes an event (see EncodeTask).
func EncodeEvent(ev record.Event) []byte {
	e := encoder{b: make([]byte, 0, 96)}
	v := version(ev.After, ev.Labels, ev.NotBefore)
	if v2Events[ev.Type] {
		v = codecV2
	}
	if ev.Defaults != nil {
		v = codecV3
	}
	e.b = append(e.b, v)
	e.uint(ev.Seq)
	e.time(ev.Time)
	e.str(string(ev.Type))
	e.str(ev.Task)
	e.str(string(ev.From))
	e.str(string(ev.To))
	e.str(ev.Agent)
	e.uint(ev.Token)
	e.str(ev.Reason)
	e.flag(ev.Deadline != nil)
	if ev.Deadline != nil {
		e.time(*ev.Deadline)
	}
	e.int(ev.Priority)
	e.int(int64(ev.MaxAttempts))
	e.str(ev.RequestID)
	e.str(ev.Staged)
	e.str(ev.Output)
	e.str(ev.Source)
	if v == codecV2 || v == codecV3 {
		e.ext(ev.After, ev.Labels, ev.NotBefore)
	}
	if v == codecV3 {
		e.defaults(*ev.Defaults)
	}
	return e.b
}

// v2Events are the event types a reader of V1 records does not know: an
// operator's cancel and set came after it. Each is written as codecV2
// whatever its fields, so that the store raises its schema with it and an
// older fencectl refuses the journal; one that read it would fold the
// journal without it (its replay put a cancelled task back in claimed/
// and took its dead token; it undid a set's priority).
var v2Events = map[record.EventType]bool{record.EvCancel: true, record.EvSet: true}

// defaults writes the fields of a tree's defaults, the backoff included.
func (e *encoder) defaults(d record.Defaults) {
	e.int(int64(d.TTL))
	e.int(int64(d.MaxAttempts))
	e.int(int64(d.RetryBackoff))
	e.int(int64(d.RetryBackoffMax))
}

// ---- decoding

// decoder reads fields in order; the first problem sticks in err and every
// later read returns a zero value, so callers check err once at the end.
type decoder struct {
	b   []byte
	err error
	v2  bool // the record is codecV2: the V1 fields, then ext's
	v3  bool // the event is codecV3: codecV2's, then the defaults
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// intN reads a varint that must fit in an int.
func (d *decoder) intN() int {
	v := d.int()
	if v < math.MinInt || v > math.MaxInt {
		d.fail(fmt.Errorf("integer %d out of range", v))
		return 0
	}
	return int(v)
}

func (d *decoder) str() string {
	n := d.uint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail(errShort)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) flag() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 {
		d.fail(errShort)
		return false
	}
	c := d.b[0]
	d.b = d.b[1:]
	if c > 1 {
		d.fail(fmt.Errorf("flag byte %d", c))
	}
	return c == 1
}

func (d *decoder) time() time.Time {
	if !d.flag() {
		return time.Time{}
	}
	sec := d.int()
	nsec := d.uint()
	if d.err == nil && nsec >= 1e9 {
		d.fail(fmt.Errorf("nanoseconds %d out of range", nsec))
	}
	if d.err != nil {
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// strs reads a list written by encoder.strs; an empty list is nil.
func (d *decoder) strs() []string {
	n := d.uint()
	if d.err != nil || n == 0 {
		return nil
	}
	if n > uint64(len(d.b)) { // every string takes at least its length byte
		d.fail(errShort)
		return nil
	}
	ss := make([]string, 0, n)
	for range n {
		ss = append(ss, d.str())
	}
	if d.err != nil {
		return nil
	}
	return ss
}

func (d *decoder) leaseEnd() *record.LeaseEnd {
	return &record.LeaseEnd{Token: d.uint(), Agent: d.str(), At: d.time(), By: record.EventType(d.str()), Reason: d.str()}
}

// start checks the version byte; ok is false for a JSON record. v2 allows
// codecV2 (task records and events), which d.v2 then reports.
func (d *decoder) start(v2 bool) (binary bool) {
	switch {
	case len(d.b) == 0:
		d.fail(errShort)
		return true
	case d.b[0] == '{':
		return false
	case d.b[0] == codecV2 && v2:
		d.v2 = true
	case d.b[0] == codecV3 && v2:
		d.v2, d.v3 = true, true
	case d.b[0] != codecV1:
		d.fail(fmt.Errorf("unknown record format %#x", d.b[0]))
		return true
	}
	d.b = d.b[1:]
	return true
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) > 0 {
		d.fail(errTrailing)
	}
	return d.err
}

// DecodeTask reads a task record written by EncodeTask (or as JSON).
func DecodeTask(v []byte) (record.Task, error) {
	d := decoder{b: v}
	if !d.start(true) {
		var t record.Task
		err := json.Unmarshal(v, &t)
		return t, err
	}
	t := record.Task{
		ID: d.str(), State: record.State(d.str()), Priority: d.int(), MaxAttempts: d.intN(), Attempts: d.intN(),
		Seq: d.uint(), Created: d.time(), Updated: d.time(),
	}
	if d.flag() {
		t.Lease = &record.Lease{Token: d.uint(), Agent: d.str(), ClaimedAt: d.time(), Deadline: d.time(),
			TTL: time.Duration(d.int()), RequestID: d.str()}
	}
	if d.flag() {
		t.Last = d.leaseEnd()
	}
	if d.v2 {
		t.After, t.Labels, t.NotBefore = d.strs(), d.strs(), d.time()
	}
	if err := d.end(); err != nil {
		return record.Task{}, err
	}
	return t, nil
}

// DecodeClaim reads a claim written by EncodeClaim (or as JSON).
func DecodeClaim(v []byte) (record.Claim, error) {
	d := decoder{b: v}
	if !d.start(false) {
		var c record.Claim
		err := json.Unmarshal(v, &c)
		return c, err
	}
	c := record.Claim{Token: d.uint(), Task: d.str(), Agent: d.str(), At: d.time(), RequestID: d.str()}
	if d.flag() {
		c.Ended = d.leaseEnd()
	}
	if err := d.end(); err != nil {
		return record.Claim{}, err
	}
	return c, nil
}

// DecodeEvent reads an event written by EncodeEvent (or as JSON).
func DecodeEvent(v []byte) (record.Event, error) {
	d := decoder{b: v}
	if !d.start(true) {
		var ev record.Event
		err := json.Unmarshal(v, &ev)
		return ev, err
	}
	ev := record.Event{
		Seq: d.uint(), Time: d.time(), Type: record.EventType(d.str()), Task: d.str(),
		From: record.State(d.str()), To: record.State(d.str()), Agent: d.str(), Token: d.uint(), Reason: d.str(),
	}
	if d.flag() {
		t := d.time()
		ev.Deadline = &t
	}
	ev.Priority = d.int()
	ev.MaxAttempts = d.intN()
	ev.RequestID, ev.Staged, ev.Output, ev.Source = d.str(), d.str(), d.str(), d.str()
	if d.v2 {
		ev.After, ev.Labels, ev.NotBefore = d.strs(), d.strs(), d.time()
	}
	if d.v3 {
		def := d.defaults()
		ev.Defaults = &def
	}
	if err := d.end(); err != nil {
		return record.Event{}, err
	}
	return ev, nil
}

// EncodeDefaults writes the tree-wide defaults (see EncodeTask).
// Defaults with a backoff are codecV2: the V1 fields, then the backoff's.
func EncodeDefaults(d record.Defaults) []byte {
	e := encoder{b: make([]byte, 0, 16)}
	if d.RetryBackoff == 0 && d.RetryBackoffMax == 0 {
		e.b = append(e.b, codecV1)
		e.int(int64(d.TTL))
		e.int(int64(d.MaxAttempts))
		return e.b
	}
	e.b = append(e.b, codecV2)
	e.defaults(d)
	return e.b
}

func (d *decoder) defaults() record.Defaults {
	return record.Defaults{TTL: time.Duration(d.int()), MaxAttempts: d.intN(), RetryBackoff: time.Duration(d.int()), RetryBackoffMax: time.Duration(d.int())}
}

// DecodeDefaults reads defaults written by EncodeDefaults (or as JSON).
func DecodeDefaults(v []byte) (record.Defaults, error) {
	d := decoder{b: v}
	if !d.start(true) {
		var def record.Defaults
		err := json.Unmarshal(v, &def)
		return def, err
	}
	var def record.Defaults
	if d.v2 && !d.v3 {
		def = d.defaults()
	} else if !d.v2 {
		def = record.Defaults{TTL: time.Duration(d.int()), MaxAttempts: d.intN()}
	} else {
		d.fail(fmt.Errorf("unknown defaults format %#x", codecV3))
	}
	if err := d.end(); err != nil {
		return record.Defaults{}, err
	}
	return def, nil
}
