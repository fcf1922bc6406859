package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// /metrics, in the Prometheus text format (version 0.0.4): what the tree
// holds now (read at each scrape), and counts of what happened, folded
// from the journal's event log, so they survive a restart of serve: a new
// serve reads the log from its start once, then only what is new.
//
// The format is written here, not with the official client library
// (github.com/prometheus/client_golang): linking it costs every fencectl
// process about 1.2 ms of package initialisation (0.85 → 2.1 ms, measured
// with GODEBUG=inittrace=1), and a claim is one process start: the reason
// the etcd client lives in another binary. The tests parse this output
// with the library's own parser (expfmt), so it stays valid.
//
// The journal records no refused call: a refusal changes nothing, the log
// included. So no metric counts refusals; fencectl_lease_ends_total
// counts the lease ends after which a call with the ended token is
// refused (stale_token), which is what the journal does record.

// leaseBuckets are the upper bounds of fencectl_lease_time_left_seconds.
var leaseBuckets = []float64{0, 30, 60, 300, 900, 3600}

// latencyBuckets are the upper bounds of fencectl_commit_observed_seconds.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// eventCounts folds the log into counters, reading from where it left
// off. Folding is done under mu; the read of a page is not, so two
// catch-ups may read the same page, and the second one skips it.
type eventCounts struct {
	mu      sync.Mutex
	last    uint64
	primed  bool // the backlog was read: later events are observed as they come
	events  map[record.EventType]float64
	failed  map[record.EventType]float64
	ends    map[record.EventType]float64
	latency histogram
	now     func() time.Time
}

func newEventCounts() *eventCounts {
	return &eventCounts{
		events: map[record.EventType]float64{}, failed: map[record.EventType]float64{}, ends: map[record.EventType]float64{},
		latency: newHistogram(latencyBuckets), now: now,
	}
}

// eventPage bounds one read of the log while catching up.
const eventPage = 10000

// catchUp folds every event after the last one folded.
func (c *eventCounts) catchUp(ctx context.Context, t *fence.Tree) error {
	for {
		c.mu.Lock()
		from := c.last
		c.mu.Unlock()
		p, err := t.EventsAfter(ctx, from, eventPage, true)
		if err != nil {
			return err
		}
		c.mu.Lock()
		if c.last == from { // else another catch-up folded this page
			at := c.now()
			for _, e := range p.Events {
				c.fold(e, at)
			}
			c.last = p.Last
		}
		done := p.Last == from
		if done {
			c.primed = true
		}
		c.mu.Unlock()
		if done {
			return nil
		}
	}
}

func (c *eventCounts) fold(e record.Event, at time.Time) {
	c.events[e.Type]++
	if e.To == record.Failed && e.From != record.Failed {
		c.failed[e.Type]++
	}
	if e.From == record.Claimed && e.To != record.Claimed {
		c.ends[e.Type]++
	}
	if c.primed {
		c.latency.observe(max(at.Sub(e.Time), 0).Seconds())
	}
}

// histogram is a cumulative histogram: counts[i] is how many values were
// at most bounds[i].
type histogram struct {
	bounds []float64
	counts []uint64
	count  uint64
	sum    float64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	h.count++
	h.sum += v
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
		}
	}
}

// metricsHandler answers a scrape: one read transaction for what the
// tree holds, then the log from where the counts left off. A journal
// that cannot be read fails the scrape (503 busy, else 500), so that
// Prometheus marks the target down rather than storing stale numbers.
func (s *server) metricsHandler(w http.ResponseWriter, r *http.Request) {
	g, err := s.tree.Gauges(r.Context())
	if err == nil {
		err = s.counts.catchUp(r.Context(), s.tree)
	}
	if err != nil {
		status := http.StatusInternalServerError
		if classify(err).Code == exitBusy {
			status = http.StatusServiceUnavailable
		}
		http.Error(w, "fencectl: "+err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	bw := bufio.NewWriter(w)
	s.writeMetrics(bw, g)
	_ = bw.Flush()
}

func (s *server) writeMetrics(w io.Writer, g fence.Gauges) {
	m := metricWriter{w: w}
	m.family("fencectl_tasks", "gauge", "Tasks in each state, now.")
	for _, st := range record.States {
		m.sample("fencectl_tasks", float64(g.Counts[st]), "state", string(st))
	}
	age := 0.0
	if !g.OldestAvailable.IsZero() {
		age = max(g.Now.Sub(g.OldestAvailable), 0).Seconds()
	}
	m.family("fencectl_oldest_available_age_seconds", "gauge", "Age of the oldest available task (since its add or adoption), now; 0 when none is available.")
	m.sample("fencectl_oldest_available_age_seconds", age)
	left := newHistogram(leaseBuckets)
	for _, d := range g.LeaseLeft {
		left.observe(d.Seconds())
	}
	m.family("fencectl_lease_time_left_seconds", "histogram", `The live leases by time left to their deadline, now (an expired lease not yet reaped is in the le="0" bucket).`)
	m.histogram("fencectl_lease_time_left_seconds", left)
	if j := s.tree.Journal(); j.Backend == "bbolt" {
		if fi, err := os.Stat(j.Where); err == nil {
			m.family("fencectl_journal_bytes", "gauge", "Size of the bbolt journal file (.fence/journal.db); absent for an etcd journal.")
			m.sample("fencectl_journal_bytes", float64(fi.Size()))
		}
	}
	m.family("fencectl_journal_last_seq", "gauge", "Sequence number of the newest event in the journal: how many events the log holds.")
	m.sample("fencectl_journal_last_seq", float64(g.LastSeq))
	m.family("fencectl_last_token", "gauge", "The highest fencing token the journal has issued.")
	m.sample("fencectl_last_token", float64(g.LastToken))

	c := s.counts
	c.mu.Lock()
	defer c.mu.Unlock()
	m.family("fencectl_events_total", "counter", "Events in the journal's log by type (claim, complete, fail, reap, release, revoke, cancel, add, adopt, requeue, put, heartbeat, missing), counted from the log itself, so a restart of serve loses nothing.")
	m.counters("fencectl_events_total", "type", c.events)
	m.family("fencectl_tasks_failed_total", "counter", "Tasks moved to failed/, by the event that moved them: fail or reap at max attempts, cancel, missing. From the journal's log.")
	m.counters("fencectl_tasks_failed_total", "by", c.failed)
	m.family("fencectl_lease_ends_total", "counter", "Leases ended, by how (complete, release, fail, reap, revoke, cancel, missing); from the journal's log. A later call with an ended lease's token is refused (stale_token) and changes nothing, the log included: the journal records no refused call, so refusals themselves are not counted.")
	m.counters("fencectl_lease_ends_total", "by", c.ends)
	m.family("fencectl_commit_observed_seconds", "histogram", "For each event committed while serve runs, the time from its commit (the event's journal time) to serve reading it after the journal watch woke it: the commit latency as serve observes it. Events in the log before serve started are not observed; on etcd, clock skew between the committing host and serve adds to it.")
	m.histogram("fencectl_commit_observed_seconds", c.latency)
}

// metricWriter writes samples in the text format.
type metricWriter struct{ w io.Writer }

func (m metricWriter) family(name, typ, help string) {
	help = strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(help)
	fmt.Fprintf(m.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample writes one sample; labels are name, value pairs.
func (m metricWriter) sample(name string, v float64, labels ...string) {
	var b strings.Builder
	b.WriteString(name)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i := 0; i < len(labels); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(labels[i] + `="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(labels[i+1]) + `"`)
		}
		b.WriteByte('}')
	}
	fmt.Fprintf(m.w, "%s %s\n", b.String(), formatFloat(v))
}

func (m metricWriter) counters(name, label string, c map[record.EventType]float64) {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	for _, k := range keys {
		m.sample(name, c[record.EventType(k)], label, k)
	}
}

func (m metricWriter) histogram(name string, h histogram) {
	for i, b := range h.bounds {
		m.sample(name+"_bucket", float64(h.counts[i]), "le", formatFloat(b))
	}
	m.sample(name+"_bucket", float64(h.count), "le", "+Inf")
	m.sample(name+"_sum", h.sum)
	m.sample(name+"_count", float64(h.count))
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
