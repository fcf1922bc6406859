package etcd

import (
	"strings"
)

// The ready index's floor.
//
// A claim takes the first key of the ready index and deletes it. etcd
// keeps a deleted key in its index (a tombstone) until the cluster is
// compacted, and a range read walks every tombstone before the live keys
// it returns. Reading the first ready page from the family's start made
// every transaction walk every task claimed since the last compaction: at
// 12,000 tasks that was most of the member's CPU, and claims ran at half
// the rate of a fresh tree.
//
// So P/m/floor holds a ready key below which no key is live, and scans of
// the ready index start there. Every commit that moves the head writes
// the floor beside it, so the two keys share a mod revision; a floor whose
// mod revision is not the head's was left behind by an older fencectl's
// commit, which may have put a ready key below it: it is not trusted, the
// scan starts from the family's start (as it always did), and the commit
// writes a floor again.
//
// A commit's floor is the first key its ready scans read from the
// snapshot that it did not delete (or the key just after the last one,
// if it deleted them all), lowered to any ready key it put. A run made
// again at once on a moved head (rebase.go) takes the lower of its floor
// and the other writer's; if the other's is below where this run's scan
// started, the other put a ready key this run never saw (a task of
// higher priority, say), and the run is made afresh instead.

// trustedFloor is the floor meta holds, if its mod revision is the
// head's ("" otherwise: scan from the start).
func trustedFloor(meta map[string]string, floorRev, headRev int64) string {
	if floorRev == 0 || floorRev != headRev {
		return ""
	}
	return meta[metaFloor]
}

// readyHint returns the floor this handle last saw (Open reads it first),
// for begin to read the first ready page from.
func (s *Store) readyHint() string {
	if f := s.floorSeen.Load(); f != nil {
		return *f
	}
	return ""
}

// noteFloor remembers floor as the latest this handle saw.
func (s *Store) noteFloor(floor string) { s.floorSeen.Store(&floor) }

// keepFirstPage files the ready page begin read from hint under the key
// a scan from the snapshot's floor looks for: no key in [hint, floor) is
// live, so a page read from at or below the floor, to the end of the
// floor's window (window.go), is the floor's page. Any other (a task of
// higher priority came in since this handle last looked, or the floor
// moved on to another window) is dropped: the scan reads the page itself.
func (t *Tx) keepFirstPage(snap *snapshot, hint string) {
	p := t.key(famReady, "")
	from := p + hint
	read := pageKey{from, readyPageEnd(p, from, rangeEnd(p)), t.firstPage}
	page, ok := snap.pages[read]
	if !ok {
		return
	}
	delete(t.pages, read)
	if first := t.firstReadyPageKey(); hint <= t.floor && first.hi == read.hi {
		t.pages[first] = page // one window (window.go), nothing live before the floor
	}
}

// noteReady records that a ready scan read key k (relative to the
// family): the keys read, in order from the floor, decide the commit's
// floor.
func (t *Tx) noteReady(k string) {
	if n := len(t.readySeen); n == 0 || k > t.readySeen[n-1] {
		t.readySeen = append(t.readySeen, k)
	}
}

// nextFloor is the floor this transaction's commit writes (see above).
func (t *Tx) nextFloor() string {
	p := t.key(famReady, "")
	f, empty := t.floor, false
	if n := len(t.readySeen); n > 0 {
		f = t.readySeen[n-1] + "\x00"
		for _, k := range t.readySeen {
			if o, mine := t.buf[p+k]; !mine || !o.del {
				f = k
				break
			}
		}
	} else if f == "" {
		f, empty = t.firstLiveReady()
	}
	for k, o := range t.buf {
		if !o.del && strings.HasPrefix(k, p) && (empty || k[len(p):] < f) {
			f, empty = k[len(p):], false
		}
	}
	if t.rebasedOn != nil && *t.rebasedOn < f {
		f = *t.rebasedOn
	}
	return f
}

// firstLiveReady is a floor for a transaction that has none (a new tree,
// or one an older fencectl wrote last) and scanned nothing (adds, say):
// the first live key of the ready page begin read from the family's
// start, so that the adds that fill a tree do not each walk the whole
// ready index (window.go: etcd counts every key of a range read). empty
// reports that the page held no key at all: then the first ready key the
// transaction puts is the floor. It is "" (no floor) when that page was
// not read.
func (t *Tx) firstLiveReady() (f string, empty bool) {
	page := t.pages[t.firstReadyPageKey()]
	switch {
	case page == nil:
		return "", false
	case len(page.Kvs) > 0:
		return string(page.Kvs[0].Key[len(t.key(famReady, "")):]), false
	}
	return "", page.Count == 0
}

// floorMoved reports whether the writer whose head this run was rebased
// on put a ready key below where this run's ready scans started: then
// the run is made afresh (see above).
func (t *Tx) floorMoved() bool {
	return t.rebasedOn != nil && t.readyScanned && *t.rebasedOn < t.floor
}

// readyFrom is where a ready scan starts: at the floor, or lower, at the
// first ready key this transaction put below it (the snapshot's page from
// the floor serves from there too: nothing in between is live).
func (t *Tx) readyFrom() string {
	p := t.key(famReady, "")
	lo := p + t.floor
	for k, o := range t.buf {
		if !o.del && strings.HasPrefix(k, p) && k < lo {
			lo = k
		}
	}
	if first := t.firstReadyPageKey(); lo != first.from && readyPageEnd(p, lo, rangeEnd(p)) == first.hi {
		if page, ok := t.pages[first]; ok {
			t.pages[pageKey{lo, first.hi, first.limit}] = page
		}
	}
	return lo
}
