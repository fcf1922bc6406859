package journal_test

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// t0 is the fixed time the records carry.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// utc is how the codec returns times: the same instant, in UTC.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(t.Unix(), int64(t.Nanosecond())).UTC()
}

func sampleTask() record.Task {
	dl := t0.Add(90 * time.Second)
	return record.Task{ID: "build-42", State: record.Claimed, Priority: -7, MaxAttempts: 3, Attempts: 2, Seq: 1 << 40,
		Created: t0, Updated: t0.Add(time.Nanosecond),
		Lease: &record.Lease{Token: 1795313309003512, Agent: "agent é 1", ClaimedAt: t0, Deadline: dl, TTL: 10 * time.Minute, RequestID: "r-7"},
		Last:  &record.LeaseEnd{Token: 17, Agent: "old", At: t0.Add(-time.Hour), By: record.EvReap, Reason: "lease expired"}}
}

func TestCodec_RoundTrip(t *testing.T) {
	task := sampleTask()
	if got, err := journal.DecodeTask(journal.EncodeTask(task)); err != nil || !reflect.DeepEqual(got, task) {
		t.Errorf("task round trip:\n got %+v, %v\nwant %+v", got, err, task)
	}
	bare := record.Task{ID: "t", State: record.Available}
	if got, err := journal.DecodeTask(journal.EncodeTask(bare)); err != nil || !reflect.DeepEqual(got, bare) {
		t.Errorf("bare task round trip: got %+v, %v", got, err)
	}
	claim := record.Claim{Token: 9, Task: "build-42", Agent: "a", At: t0, RequestID: "k", Ended: task.Last}
	if got, err := journal.DecodeClaim(journal.EncodeClaim(claim)); err != nil || !reflect.DeepEqual(got, claim) {
		t.Errorf("claim round trip: got %+v, %v", got, err)
	}
	dl := t0.Add(time.Minute)
	ev := record.Event{Seq: 3, Time: t0, Type: record.EvPut, Task: "build-42", From: record.Claimed, To: record.Claimed,
		Agent: "a", Token: 9, Reason: "r", Deadline: &dl, Priority: math.MinInt64, MaxAttempts: math.MaxInt32,
		RequestID: "k", Staged: "put-00ff", Output: "log.txt", Source: "inbox"}
	if got, err := journal.DecodeEvent(journal.EncodeEvent(ev)); err != nil || !reflect.DeepEqual(got, ev) {
		t.Errorf("event round trip:\n got %+v, %v\nwant %+v", got, err, ev)
	}
}

// A record whose new fields are empty is written as V1, exactly as a
// fencectl that knows only V1 writes it; one with any of them as V2, and
// both read back whole.
func TestCodec_V1UnlessNewFields(t *testing.T) {
	task := sampleTask()
	if b := journal.EncodeTask(task); b[0] != 0x01 || journal.IsV2(b) {
		t.Errorf("task without new fields encoded with version byte %#x, IsV2 %v; want V1", b[0], journal.IsV2(b))
	}
	ev := record.Event{Seq: 1, Time: t0, Type: record.EvAdd, Task: "t1", To: record.Available}
	if b := journal.EncodeEvent(ev); b[0] != 0x01 || journal.IsV2(b) {
		t.Errorf("event without new fields encoded with version byte %#x; want V1", b[0])
	}
	for name, set := range map[string]func(*record.Task, *record.Event){
		"after":      func(t *record.Task, e *record.Event) { t.After, e.After = []string{"a", "b"}, []string{"a"} },
		"labels":     func(t *record.Task, e *record.Event) { t.Labels, e.Labels = []string{"gpu"}, []string{"x", "y"} },
		"not_before": func(t *record.Task, e *record.Event) { t.NotBefore, e.NotBefore = t0.Add(time.Hour), t0 },
		"all": func(t *record.Task, e *record.Event) {
			t.After, t.Labels, t.NotBefore = []string{"a"}, []string{"l"}, t0
			e.After, e.Labels, e.NotBefore = []string{"a"}, []string{"l"}, t0
		},
	} {
		tk, e := task, ev
		set(&tk, &e)
		b := journal.EncodeTask(tk)
		if !journal.IsV2(b) {
			t.Errorf("%s: task encoded with version byte %#x; want V2", name, b[0])
		}
		if got, err := journal.DecodeTask(b); err != nil || !reflect.DeepEqual(got, tk) {
			t.Errorf("%s: task round trip:\n got %+v, %v\nwant %+v", name, got, err, tk)
		}
		eb := journal.EncodeEvent(e)
		if !journal.IsV2(eb) {
			t.Errorf("%s: event encoded with version byte %#x; want V2", name, eb[0])
		}
		if got, err := journal.DecodeEvent(eb); err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("%s: event round trip:\n got %+v, %v\nwant %+v", name, got, err, e)
		}
		old, _ := json.Marshal(tk)
		if got, err := journal.DecodeTask(old); err != nil || !reflect.DeepEqual(got, tk) {
			t.Errorf("%s: JSON task: got %+v, %v", name, got, err)
		}
		for n := 0; n < len(b); n++ {
			if _, err := journal.DecodeTask(b[:n]); err == nil {
				t.Errorf("%s: V2 task cut to %d of %d bytes decoded", name, n, len(b))
			}
		}
	}
	// Claims and defaults have no V2: the byte is refused there.
	c := journal.EncodeClaim(record.Claim{Token: 1, Task: "t"})
	c[0] = 0x02
	if _, err := journal.DecodeClaim(c); err == nil {
		t.Error("a claim with version byte 2 was accepted")
	}
}

func TestCodec_Defaults(t *testing.T) {
	d := record.Defaults{TTL: 90 * time.Second, MaxAttempts: 5}
	if got, err := journal.DecodeDefaults(journal.EncodeDefaults(d)); err != nil || got != d {
		t.Errorf("defaults round trip: %+v, %v", got, err)
	}
	old, _ := json.Marshal(d)
	if got, err := journal.DecodeDefaults(old); err != nil || got != d {
		t.Errorf("JSON defaults (schema 1): %+v, %v", got, err)
	}
	bin := journal.EncodeDefaults(d)
	if _, err := journal.DecodeDefaults(bin[:len(bin)-1]); err == nil {
		t.Error("truncated defaults decoded")
	}
}

// Records written before the binary codec are JSON; they must read back
// exactly as a binary record of the same value does.
func TestCodec_ReadsJSONRecords(t *testing.T) {
	task := sampleTask()
	old, _ := json.Marshal(task)
	fromJSON, err := journal.DecodeTask(old)
	if err != nil {
		t.Fatal(err)
	}
	fromBin, _ := journal.DecodeTask(journal.EncodeTask(task))
	if !reflect.DeepEqual(fromJSON, fromBin) {
		t.Errorf("JSON and binary decode differ:\nJSON %+v\n bin %+v", fromJSON, fromBin)
	}
	ev := record.Event{Seq: 1, Time: t0, Type: record.EvAdd, Task: "t1", To: record.Available}
	oldEv, _ := json.Marshal(ev)
	if got, err := journal.DecodeEvent(oldEv); err != nil || !reflect.DeepEqual(got, ev) {
		t.Errorf("JSON event: got %+v, %v", got, err)
	}
	claim := record.Claim{Token: 9, Task: "t1", Agent: "a", At: t0}
	oldClaim, _ := json.Marshal(claim)
	if got, err := journal.DecodeClaim(oldClaim); err != nil || !reflect.DeepEqual(got, claim) {
		t.Errorf("JSON claim: got %+v, %v", got, err)
	}
}

// Every cut of a record, a byte too many, an unknown version and a bad
// flag are errors, never a panic and never a half-read value.
func TestCodec_DamagedRecords(t *testing.T) {
	full := journal.EncodeTask(sampleTask())
	for n := 0; n < len(full); n++ {
		if got, err := journal.DecodeTask(full[:n]); err == nil {
			t.Errorf("record cut to %d of %d bytes decoded: %+v", n, len(full), got)
		}
	}
	if _, err := journal.DecodeTask(append(append([]byte{}, full...), 0)); err == nil {
		t.Error("a byte after the record was accepted")
	}
	if _, err := journal.DecodeTask(append([]byte{7}, full[1:]...)); err == nil {
		t.Error("an unknown version byte was accepted")
	}
	bad := journal.EncodeTask(record.Task{ID: "t"})
	bad[len(bad)-1] = 2 // the last flag (no Last) as 2
	if _, err := journal.DecodeTask(bad); err == nil {
		t.Error("flag byte 2 was accepted")
	}
	ev := journal.EncodeEvent(record.Event{Seq: 1, Time: t0, Type: record.EvAdd, Task: "t1", To: record.Available})
	for n := 0; n < len(ev); n++ {
		if _, err := journal.DecodeEvent(ev[:n]); err == nil {
			t.Errorf("event cut to %d of %d bytes decoded", n, len(ev))
		}
	}
}

// FuzzCodecRoundTrip: any record the journal can hold decodes to itself
// (times as the same instant in UTC), and its encoding never looks like
// JSON to the decoder.
func FuzzCodecRoundTrip(f *testing.F) {
	f.Add("t1", "claimed", "agent", "", int64(0), int64(3), uint64(1), int64(1893456000), int64(5), true, true)
	f.Add("", "", "", "\x00\xff", int64(math.MinInt64), int64(-1), uint64(math.MaxUint64), int64(-62135596800), int64(0), false, true)
	f.Add("x", "{", "}", "{\"id\":1}", int64(math.MaxInt64), int64(math.MaxInt32), uint64(0), int64(253402300799), int64(999999999), true, false)
	f.Fuzz(func(t *testing.T, id, state, agent, reason string, prio, n int64, token uint64, sec, nsec int64, lease, last bool) {
		at := time.Unix(sec, nsec%1e9).In(time.FixedZone("x", 3600))
		task := record.Task{ID: id, State: record.State(state), Priority: prio, MaxAttempts: int(n), Attempts: int(-n),
			Seq: token, Created: at, Updated: time.Time{}}
		// The V2 fields, from the strings: lists as the codec returns
		// them (nil when empty), a time only when lease is set.
		after, labels := nonEmpty(agent, reason), nonEmpty(id)
		task.After, task.Labels = after, labels
		if lease {
			task.Lease = &record.Lease{Token: token, Agent: agent, ClaimedAt: at, Deadline: at, TTL: time.Duration(prio), RequestID: reason}
		}
		if last {
			task.Last = &record.LeaseEnd{Token: token, Agent: agent, At: at, By: record.EventType(reason), Reason: reason}
		}
		if lease {
			task.NotBefore = at
		}
		want := task
		want.Created, want.NotBefore = utc(at), utc(task.NotBefore)
		if lease {
			l := *task.Lease
			l.ClaimedAt, l.Deadline = utc(at), utc(at)
			want.Lease = &l
		}
		if last {
			e := *task.Last
			e.At = utc(at)
			want.Last = &e
		}
		got, err := journal.DecodeTask(journal.EncodeTask(task))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("task round trip:\n got %+v, %v\nwant %+v", got, err, want)
		}
		dl := at
		ev := record.Event{Seq: token, Time: at, Type: record.EventType(state), Task: id, From: record.State(agent),
			To: record.State(reason), Agent: agent, Token: token, Reason: reason, Priority: prio, MaxAttempts: int(n),
			RequestID: id, Staged: state, Output: agent, Source: reason, After: labels, Labels: after}
		if lease {
			ev.Deadline = &dl
		}
		if last {
			ev.NotBefore = at
		}
		wantEv := ev
		wantEv.Time, wantEv.NotBefore = utc(at), utc(ev.NotBefore)
		if lease {
			u := utc(at)
			wantEv.Deadline = &u
		}
		gotEv, err := journal.DecodeEvent(journal.EncodeEvent(ev))
		if err != nil || !reflect.DeepEqual(gotEv, wantEv) {
			t.Fatalf("event round trip:\n got %+v, %v\nwant %+v", gotEv, err, wantEv)
		}
		c := record.Claim{Token: token, Task: id, Agent: agent, At: at, RequestID: reason, Ended: task.Last}
		wantC := c
		wantC.At, wantC.Ended = utc(at), want.Last
		gotC, err := journal.DecodeClaim(journal.EncodeClaim(c))
		if err != nil || !reflect.DeepEqual(gotC, wantC) {
			t.Fatalf("claim round trip:\n got %+v, %v\nwant %+v", gotC, err, wantC)
		}
	})
}

// nonEmpty is the non-empty strings of ss, nil if none.
func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
