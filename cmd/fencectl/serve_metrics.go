//go:build !noserve

package main

import (
	"context"
	"maps"
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
// the log from its start once, with the journal's count of the events
// compact dropped from it, then only what is new. The process and Go
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
// off. compact drops the events of finished tasks from the log, so a count
// of the log read from its start would fall after it, and a counter that
// falls across a restart of serve is read by Prometheus as a reset. So
// every page of the log is read with the journal's count of the events
// compaction dropped (fence.CountPage), and when that count is not the
// one the counters hold (at the start, or after a compact) the whole log
// is counted again with it (recount) and every counter raised to its
// total, never lowered: the totals of every event ever appended.
type eventCounts struct {
	reg *prometheus.Registry
	// mu is held through a whole catch-up: the reads are one at a time
	// anyway (readGate), and one catch-up finds what another would.
	mu   sync.Mutex
	last uint64
	// dropped is the count of dropped events the counters hold; primed
	// says the counters hold one (and later events are observed as they
	// come).
	dropped map[fence.EventKind]uint64
	primed  bool
	// vecs are the counters: fencectl_events_total,
	// fencectl_tasks_failed_total and fencectl_lease_ends_total (see
	// labels); held is what each has counted, by label.
	vecs    [3]*prometheus.CounterVec
	held    totals
	latency prometheus.Histogram
	now     func() time.Time
}

// totals are counts by label for each of the three counters.
type totals [3]map[string]float64

func newTotals() totals { return totals{{}, {}, {}} }

// add counts n events of kind k.
func (s totals) add(k fence.EventKind, n float64) {
	for i, l := range labels(k) {
		if l != "" {
			s[i][l] += n
		}
	}
}

// labels are the labels an event of kind k counts under in each counter,
// "" where it does not count: every event by its type, an event that
// moved a task into failed/ and one that ended a lease by theirs.
func labels(k fence.EventKind) [3]string {
	l := [3]string{string(k.Type), "", ""}
	if k.To == record.Failed && k.From != record.Failed {
		l[1] = string(k.Type)
	}
	if k.From == record.Claimed && k.To != record.Claimed {
		l[2] = string(k.Type)
	}
	return l
}

func newEventCounts() *eventCounts {
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencectl_events_total",
		Help: "Events in the journal's log by type (claim, complete, fail, reap, release, revoke, cancel, add, adopt, requeue, put, heartbeat, missing), counted from the log itself and the journal's count of the events compact dropped from it, so a restart of serve loses nothing.",
	}, []string{"type"})
	failed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencectl_tasks_failed_total",
		Help: "Tasks moved to failed/, by the event that moved them: fail or reap at max attempts, cancel, missing. From the journal's log.",
	}, []string{"by"})
	ends := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencectl_lease_ends_total",
		Help: "Leases ended, by how (complete, release, fail, reap, revoke, cancel, missing); from the journal's log. A later call with an ended lease's token is refused (stale_token) and changes nothing, the log included: the journal records no refused call, so refusals themselves are not counted.",
	}, []string{"by"})
	c := &eventCounts{
		reg:  prometheus.NewRegistry(),
		vecs: [3]*prometheus.CounterVec{events, failed, ends},
		held: newTotals(),
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
		ends.WithLabelValues(string(by))
	}
	for _, by := range taskFailers {
		failed.WithLabelValues(string(by))
	}
	c.reg.MustRegister(events, failed, ends, c.latency,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	return c
}

// eventPage bounds one read of the log while catching up.
const eventPage = 10000

// page reads the events after seq after, with the count of dropped events.
func page(ctx context.Context, t *readGate, after uint64) (fence.CountPage, error) {
	return gated(ctx, t, func() (fence.CountPage, error) { return t.Tree.CountEventsAfter(ctx, after, eventPage) })
}

// catchUp folds every event after the last one folded, or counts the log
// again if compaction dropped events since the last read.
func (c *eventCounts) catchUp(ctx context.Context, t *readGate) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		p, err := page(ctx, t, c.last)
		if err != nil {
			return err
		}
		if !c.primed || !maps.Equal(p.Dropped, c.dropped) {
			return c.recount(ctx, t)
		}
		at := c.now()
		for _, e := range p.Events {
			c.raise(kindOf(e), 1)
			c.latency.Observe(max(at.Sub(e.Time), 0).Seconds())
		}
		done := p.Last == c.last
		c.last = p.Last
		if done {
			return nil
		}
	}
}

// recount counts the whole log, and the events compaction dropped from
// it, and raises every counter to its total. The events it reads are not
// observed for the latency: some may be old.
func (c *eventCounts) recount(ctx context.Context, t *readGate) error {
	for {
		tot, last, dropped, ok, err := countLog(ctx, t)
		if err != nil {
			return err
		}
		if !ok {
			continue // a compaction committed meanwhile
		}
		for i, vec := range c.vecs {
			for l, n := range tot[i] {
				if d := n - c.held[i][l]; d > 0 {
					vec.WithLabelValues(l).Add(d)
					c.held[i][l] = n
				}
			}
		}
		c.last, c.dropped, c.primed = last, dropped, true
		return nil
	}
}

// countLog counts the whole log, page by page, and the dropped events;
// ok is false if a compaction committed while it read (the count of
// dropped events is not the same on every page), so that a total it
// returns is that of one state of the journal.
func countLog(ctx context.Context, t *readGate) (tot totals, last uint64, dropped map[fence.EventKind]uint64, ok bool, err error) {
	tot = newTotals()
	for first := true; ; first = false {
		p, err := page(ctx, t, last)
		if err != nil {
			return tot, 0, nil, false, err
		}
		if first {
			dropped = p.Dropped
			for k, n := range dropped {
				tot.add(k, float64(n))
			}
		} else if !maps.Equal(p.Dropped, dropped) {
			return tot, 0, nil, false, nil
		}
		for _, e := range p.Events {
			tot.add(kindOf(e), 1)
		}
		if p.Last == last {
			return tot, last, dropped, true, nil
		}
		last = p.Last
	}
}

func kindOf(e record.Event) fence.EventKind {
	return fence.EventKind{Type: e.Type, From: e.From, To: e.To}
}

// raise counts n more events of kind k.
func (c *eventCounts) raise(k fence.EventKind, n float64) {
	for i, l := range labels(k) {
		if l != "" {
			c.vecs[i].WithLabelValues(l).Add(n)
			c.held[i][l] += n
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
