//go:build !noserve

package main

import (
	"context"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// /metrics, with the official client library (client_golang): what the
// tree holds now, read in one transaction at each scrape (a collector of
// constant metrics, registered for that scrape only), and counts of what
// happened, folded from the journal's event log into counters that live
// as long as serve, so they survive a restart of serve: a new serve reads
// the log from its start once, then only what is new. The process and Go
// runtime collectors come with them (process_*, go_*).
//
// The library's package initialisers cost a process about 1.2 ms, so it
// is linked only into fencectl-serve (see serve.go): a claim, one process
// start, does not pay for it.
//
// The journal records no refused call: a refusal changes nothing, the log
// included. So no metric counts refusals; fencectl_lease_ends_total
// counts the lease ends after which a call with the ended token is
// refused (stale_token), which is what the journal does record.

// leaseBuckets are the upper bounds of fencectl_lease_time_left_seconds.
var leaseBuckets = []float64{0, 30, 60, 300, 900, 3600}

// latencyBuckets are the upper bounds of fencectl_commit_observed_seconds.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// leaseEnders are the events that end a lease; taskFailers those that
// move a task to failed/.
var (
	leaseEnders = []record.EventType{record.EvComplete, record.EvRelease, record.EvFail, record.EvReap, record.EvRevoke, record.EvCancel, record.EvMissing}
	taskFailers = []record.EventType{record.EvFail, record.EvReap, record.EvCancel, record.EvMissing}
)

// eventCounts folds the log into counters, reading from where it left
// off. Folding is done under mu; the read of a page is not, so two
// catch-ups may read the same page, and the second one skips it.
type eventCounts struct {
	reg     *prometheus.Registry
	mu      sync.Mutex
	last    uint64
	primed  bool // the backlog was read: later events are observed as they come
	events  *prometheus.CounterVec
	failed  *prometheus.CounterVec
	ends    *prometheus.CounterVec
	latency prometheus.Histogram
	now     func() time.Time
}

func newEventCounts() *eventCounts {
	c := &eventCounts{
		reg: prometheus.NewRegistry(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencectl_events_total",
			Help: "Events in the journal's log by type (claim, complete, fail, reap, release, revoke, cancel, add, adopt, requeue, put, heartbeat, missing), counted from the log itself, so a restart of serve loses nothing.",
		}, []string{"type"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencectl_tasks_failed_total",
			Help: "Tasks moved to failed/, by the event that moved them: fail or reap at max attempts, cancel, missing. From the journal's log.",
		}, []string{"by"}),
		ends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencectl_lease_ends_total",
			Help: "Leases ended, by how (complete, release, fail, reap, revoke, cancel, missing); from the journal's log. A later call with an ended lease's token is refused (stale_token) and changes nothing, the log included: the journal records no refused call, so refusals themselves are not counted.",
		}, []string{"by"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencectl_commit_observed_seconds",
			Help:    "For each event committed while serve runs, the time from its commit (the event's journal time) to serve reading it after the journal watch woke it: the commit latency as serve observes it. Events in the log before serve started are not observed; on etcd, clock skew between the committing host and serve adds to it.",
			Buckets: latencyBuckets,
		}),
		now: now,
	}
	// The ways a lease ends and a task fails are known, so their series
	// start at 0 (Prometheus's advice: a rate() over a series that
	// appears at its first increment misses that increment).
	for _, by := range leaseEnders {
		c.ends.WithLabelValues(string(by))
	}
	for _, by := range taskFailers {
		c.failed.WithLabelValues(string(by))
	}
	c.reg.MustRegister(c.events, c.failed, c.ends, c.latency,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	return c
}

// eventPage bounds one read of the log while catching up.
const eventPage = 10000

// catchUp folds every event after the last one folded.
func (c *eventCounts) catchUp(ctx context.Context, t *readGate) error {
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
	c.events.WithLabelValues(string(e.Type)).Inc()
	if e.To == record.Failed && e.From != record.Failed {
		c.failed.WithLabelValues(string(e.Type)).Inc()
	}
	if e.From == record.Claimed && e.To != record.Claimed {
		c.ends.WithLabelValues(string(e.Type)).Inc()
	}
	if c.primed {
		c.latency.Observe(max(at.Sub(e.Time), 0).Seconds())
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
	scrape := prometheus.NewPedanticRegistry()
	scrape.MustRegister(treeReading{g: g, journal: s.tree.Journal()})
	w.Header().Set("Cache-Control", "no-store")
	promhttp.HandlerFor(prometheus.Gatherers{s.counts.reg, scrape}, promhttp.HandlerOpts{
		ErrorHandling: promhttp.HTTPErrorOnError,
	}).ServeHTTP(w, r)
}

// The metrics of what the tree holds now.
var (
	tasksDesc = prometheus.NewDesc("fencectl_tasks",
		"Tasks in each state, now.", []string{"state"}, nil)
	oldestDesc = prometheus.NewDesc("fencectl_oldest_available_age_seconds",
		"Age of the oldest available task (since its add or adoption), now; 0 when none is available.", nil, nil)
	leaseLeftDesc = prometheus.NewDesc("fencectl_lease_time_left_seconds",
		`The live leases by time left to their deadline, now (an expired lease not yet reaped is in the le="0" bucket).`, nil, nil)
	journalBytesDesc = prometheus.NewDesc("fencectl_journal_bytes",
		"Size of the bbolt journal file (.fence/journal.db); absent for an etcd journal.", nil, nil)
	lastSeqDesc = prometheus.NewDesc("fencectl_journal_last_seq",
		"Sequence number of the newest event in the journal: how many events the log holds.", nil, nil)
	lastTokenDesc = prometheus.NewDesc("fencectl_last_token",
		"The highest fencing token the journal has issued.", nil, nil)
)

// treeReading collects one scrape's reading of the tree as constant metrics.
type treeReading struct {
	g       fence.Gauges
	journal fence.JournalInfo
}

func (treeReading) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{tasksDesc, oldestDesc, leaseLeftDesc, journalBytesDesc, lastSeqDesc, lastTokenDesc} {
		ch <- d
	}
}

func (n treeReading) Collect(ch chan<- prometheus.Metric) {
	g := n.g
	for _, st := range record.States {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(g.Counts[st]), string(st))
	}
	age := 0.0
	if !g.OldestAvailable.IsZero() {
		age = max(g.Now.Sub(g.OldestAvailable), 0).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, age)
	buckets := make(map[float64]uint64, len(leaseBuckets))
	sum := 0.0
	for _, d := range g.LeaseLeft {
		v := d.Seconds()
		sum += v
		for _, b := range leaseBuckets {
			if v <= b {
				buckets[b]++
			}
		}
	}
	for _, b := range leaseBuckets {
		buckets[b] += 0 // every bound is shown, the empty ones too
	}
	ch <- prometheus.MustNewConstHistogram(leaseLeftDesc, uint64(len(g.LeaseLeft)), sum, buckets)
	if n.journal.Backend == "bbolt" {
		if fi, err := os.Stat(n.journal.Where); err == nil {
			ch <- prometheus.MustNewConstMetric(journalBytesDesc, prometheus.GaugeValue, float64(fi.Size()))
		}
	}
	ch <- prometheus.MustNewConstMetric(lastSeqDesc, prometheus.GaugeValue, float64(g.LastSeq))
	ch <- prometheus.MustNewConstMetric(lastTokenDesc, prometheus.GaugeValue, float64(g.LastToken))
}
