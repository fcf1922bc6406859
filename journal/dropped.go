package journal

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/fencectl/fencectl/journal/record"
)

// What compaction drops, counted. DropEvents removes events from the log
// for good; a count of events read from the log's start (serve's
// /metrics) would fall after every compact. So each store keeps, beside
// the log and in the transaction that drops them, how many events of each
// kind it ever dropped (Tx.Dropped): the log plus that tally is every
// event ever appended.

// EventKind is an event's type and the states it moved its task between:
// enough to count by type, by lease end (from claimed) and by the way
// into failed/.
type EventKind struct {
	Type     record.EventType
	From, To record.State
}

// KindOf is ev's kind.
func KindOf(ev record.Event) EventKind {
	return EventKind{Type: ev.Type, From: ev.From, To: ev.To}
}

// droppedEntry is one kind's count as the stores keep it.
type droppedEntry struct {
	Type record.EventType `json:"type"`
	From record.State     `json:"from,omitempty"`
	To   record.State     `json:"to,omitempty"`
	N    uint64           `json:"n"`
}

// EncodeDropped encodes a tally, in kind order (the same tally, the same
// bytes).
func EncodeDropped(m map[EventKind]uint64) []byte {
	entries := make([]droppedEntry, 0, len(m))
	for k, n := range m {
		entries = append(entries, droppedEntry{Type: k.Type, From: k.From, To: k.To, N: n})
	}
	slices.SortFunc(entries, func(a, b droppedEntry) int {
		return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	b, _ := json.Marshal(entries) // strings and numbers: never fails
	return b
}

// DecodeDropped decodes a tally; nil or empty is none.
func DecodeDropped(b []byte) (map[EventKind]uint64, error) {
	m := map[EventKind]uint64{}
	if len(b) == 0 {
		return m, nil
	}
	var entries []droppedEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("decode the count of dropped events: %w", err)
	}
	for _, e := range entries {
		m[EventKind{Type: e.Type, From: e.From, To: e.To}] += e.N
	}
	return m, nil
}

// AddDropped is the tally enc (EncodeDropped) with evs counted in.
func AddDropped(enc []byte, evs []record.Event) ([]byte, error) {
	m, err := DecodeDropped(enc)
	if err != nil {
		return nil, err
	}
	for _, ev := range evs {
		m[KindOf(ev)]++
	}
	return EncodeDropped(m), nil
}
