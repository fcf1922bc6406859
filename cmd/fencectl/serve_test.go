//go:build !noserve

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fencectl/fencectl/fence"
)

// serveFixture is a tree, a server on it as serve runs it (woken by the
// journal's watch) and the CLI to change the tree.
type serveFixture struct {
	t       *testing.T
	dir     string
	timeout time.Duration // serve's --timeout (0: the default)
	tree    *fence.Tree
	srv     *server
	http    *httptest.Server
}

func newServeFixture(t *testing.T) *serveFixture { return newServeFixtureTimeout(t, 0) }

// newServeFixtureTimeout is a fixture whose serve has --timeout timeout,
// which bounds a read's wait for its turn (readGate).
func newServeFixtureTimeout(t *testing.T, timeout time.Duration) *serveFixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	f := &serveFixture{t: t, dir: dir, timeout: timeout}
	f.cli("init")
	f.start()
	return f
}

// start opens the tree and serves it, as a new serve process would.
func (f *serveFixture) start() {
	f.t.Helper()
	tree, err := fence.Open(f.dir, fence.Options{Clock: testClock})
	if err != nil {
		f.t.Fatal(err)
	}
	srv := newServer(tree, &output{stdout: io.Discard, stderr: io.Discard}, true, f.timeout) // httptest listens on 127.0.0.1
	f.tree, f.srv = tree, srv
	// serve's clock as in its own process, where no command sets the
	// CLI's (treeNow): here the commands that f.cli runs in this process
	// set it, which would race with serve reading it.
	srv.counts.now = time.Now
	if testClock != nil {
		srv.counts.now = testClock
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.counts.catchUp(ctx, srv.tree); err != nil {
		f.t.Fatal(err)
	}
	ch, err := tree.Watch()
	if err != nil {
		f.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch.C():
				srv.changed(ctx)
			}
		}
	}()
	hs := httptest.NewServer(srv.routes())
	f.http = hs
	f.t.Cleanup(func() {
		srv.feed.close()
		hs.Close()
		cancel()
		<-done
		ch.Close()
		tree.Close()
	})
}

// cli runs fencectl on the tree and returns stdout; it must exit 0.
func (f *serveFixture) cli(args ...string) string {
	f.t.Helper()
	code, stdout, stderr := runCLI(append([]string{"--dir", f.dir}, args...)...)
	if code != 0 {
		f.t.Fatalf("fencectl %v: exit %d: %s", args, code, stderr)
	}
	return stdout
}

// adoptAll runs writers until inbox/ is empty: each adopts at most a
// turn's worth of files (fence's adoptPerTurn).
func (f *serveFixture) adoptAll() {
	f.t.Helper()
	for left := -1; left != 0; {
		f.cli("reap")
		entries, err := os.ReadDir(filepath.Join(f.dir, "inbox"))
		if err != nil || (left >= 0 && len(entries) >= left) {
			f.t.Fatalf("a writer adopted nothing of the %d files in inbox/ (%v)", len(entries), err)
		}
		left = len(entries)
	}
}

// get GETs path and returns the response (body read) or fails.
func (f *serveFixture) get(path string, wantStatus int) (*http.Response, string) {
	f.t.Helper()
	return f.do("GET", path, "", wantStatus)
}

// do sends method path to serve with host as the Host header ("": the
// server's address) and returns the response (body read) or fails.
func (f *serveFixture) do(method, path, host string, wantStatus int) (*http.Response, string) {
	f.t.Helper()
	return doHTTP(f.t, f.http.URL, method, path, host, wantStatus)
}

func doHTTP(t *testing.T, base, method, path, host string, wantStatus int) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantStatus && resp.Header.Get("Content-Type") == "text/event-stream" {
		t.Fatalf("%s %s (Host %q): %d (an event stream), want %d", method, path, host, resp.StatusCode, wantStatus) // its body never ends
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("%s %s (Host %q): %d, want %d: %s", method, path, host, resp.StatusCode, wantStatus, b)
	}
	return resp, string(b)
}

// getJSON GETs path (200) and decodes the body into v, refusing unknown
// fields: the answer has the shape of the --json type.
func (f *serveFixture) getJSON(path string, v any) *http.Response {
	f.t.Helper()
	resp, body := f.get(path, 200)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		f.t.Errorf("GET %s: Content-Type %q", path, ct)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		f.t.Fatalf("GET %s: %v: %s", path, err, body)
	}
	return resp
}

// TestServe_Endpoints: every JSON endpoint answers the --json shape of
// its command, and every answer carries the headers that keep a browser
// from reading it as anything else.
func TestServe_Endpoints(t *testing.T) {
	f := newServeFixture(t)
	f.cli("add", "--id", "t1")
	f.cli("add", "--id", "t2")
	var cl claimJSON
	if err := json.Unmarshal([]byte(f.cli("claim", "t2", "--agent", "a1", "--json")), &cl); err != nil {
		t.Fatal(err)
	}

	var st statusJSON
	resp := f.getJSON("/api/status", &st)
	if st.Counts["available"] != 1 || st.Counts["claimed"] != 1 || len(st.Leases) != 1 || st.Leases[0].Token != cl.Token {
		t.Errorf("status = %+v", st)
	}
	for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Cache-Control": "no-store"} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	var tasks []taskJSON
	f.getJSON("/api/tasks?state=claimed", &tasks)
	if len(tasks) != 1 || tasks[0].Task != "t2" || tasks[0].Lease.Agent != "a1" {
		t.Errorf("tasks = %+v", tasks)
	}
	var show showJSON
	f.getJSON("/api/tasks/t2", &show)
	if show.Task != "t2" || len(show.Events) != 2 {
		t.Errorf("show = %+v", show)
	}
	var evs []eventJSON
	resp = f.getJSON("/api/events?after=1", &evs)
	if len(evs) != 2 || evs[0].Seq != 2 || evs[1].Type != "claim" || resp.Header.Get("Fence-Last-Seq") != "3" {
		t.Errorf("events after 1 = %+v (last %s)", evs, resp.Header.Get("Fence-Last-Seq"))
	}
	var outs []outputJSON
	f.getJSON("/api/tasks/t1/outputs", &outs)
	if len(outs) != 0 {
		t.Errorf("outputs of t1 = %+v", outs)
	}
	_, body := f.get("/api/tasks/nope", 404)
	var eo errorObject
	if err := json.Unmarshal([]byte(body), &eo); err != nil || eo.Code != exitNoSuchTask || eo.Reason != fence.ReasonNoSuchTask {
		t.Errorf("unknown task: %s", body)
	}
}

// TestServe_OutputsStayInTheTree: an output is sent as an attachment of
// type octet-stream whatever its name says (an .html output is never
// rendered); names and ids that would leave out/<id>/ are refused before
// any file is opened, and a symlink planted in out/ is not followed.
func TestServe_OutputsStayInTheTree(t *testing.T) {
	f := newServeFixture(t)
	f.cli("add", "--id", "t1")
	var cl claimJSON
	if err := json.Unmarshal([]byte(f.cli("claim", "t1", "--json")), &cl); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "page.html")
	if err := os.WriteFile(page, []byte("<script>alert(1)</script>"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.cli("put", "t1", "page.html", page, "--token", jsonNum(cl.Token))
	resp, body := f.get("/api/tasks/t1/outputs/page.html", 200)
	if body != "<script>alert(1)</script>" {
		t.Errorf("body = %q", body)
	}
	for k, v := range map[string]string{
		"Content-Type": "application/octet-stream", "Content-Disposition": "attachment; filename*=UTF-8''page.html",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(f.dir, "out", "t1", "link")); err != nil {
		t.Fatal(err)
	}
	f.get("/api/tasks/t1/outputs/link", 404)
	var outs []outputJSON
	f.getJSON("/api/tasks/t1/outputs", &outs)
	if len(outs) != 1 || outs[0].Name != "page.html" {
		t.Errorf("outputs = %+v, want page.html alone (the symlink left out)", outs)
	}
	// out/ itself replaced by a symlink under a running serve: not
	// followed either (os.OpenRoot would follow it).
	elsewhere := t.TempDir()
	if err := os.MkdirAll(filepath.Join(elsewhere, "t1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "t1", "stolen"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(f.dir, "out"), filepath.Join(f.dir, "out.real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(f.dir, "out")); err != nil {
		t.Fatal(err)
	}
	if _, body := f.get("/api/tasks/t1/outputs/stolen", 404); strings.Contains(body, "secret") {
		t.Errorf("an output read through a symlinked out/: %s", body)
	}
	f.getJSON("/api/tasks/t1/outputs", &outs)
	if len(outs) != 0 {
		t.Errorf("outputs through a symlinked out/ = %+v, want none", outs)
	}
	if err := os.Remove(filepath.Join(f.dir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(f.dir, "out.real"), filepath.Join(f.dir, "out")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/api/tasks/t1/outputs/..%2F..%2F.fence%2Fjournal.db", "/api/tasks/..%2Ft1/outputs/page.html",
		"/api/tasks/t1/outputs/.hidden", "/api/tasks/" + strings.Repeat("a", 200),
	} {
		_, body := f.get(p, 400)
		if !strings.Contains(body, `"reason":"invalid_input"`) || strings.Contains(body, "secret") {
			t.Errorf("GET %s: %s", p, body)
		}
	}
}

func jsonNum(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// sseReader reads the events of a stream.
type sseReader struct {
	t  *testing.T
	sc *bufio.Scanner
}

// next returns the next message's event name and data, or fails after
// a generous bound.
func (r *sseReader) next() (string, string) {
	r.t.Helper()
	type msg struct{ event, data string }
	got := make(chan msg, 1)
	go func() {
		var m msg
		for r.sc.Scan() {
			line := r.sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				m.event = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				m.data = line[len("data: "):]
			case line == "" && m.event != "":
				got <- m
				return
			}
		}
		close(got)
	}()
	select {
	case m, ok := <-got:
		if !ok {
			r.t.Fatal("stream ended")
		}
		return m.event, m.data
	case <-time.After(20 * time.Second):
		r.t.Fatal("no message on the stream")
	}
	return "", ""
}

func (f *serveFixture) stream(path string) *sseReader {
	f.t.Helper()
	req, _ := http.NewRequest("GET", f.http.URL+path, nil)
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		f.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		f.t.Fatalf("stream Content-Type %q", ct)
	}
	f.t.Cleanup(func() { resp.Body.Close() })
	return &sseReader{t: f.t, sc: bufio.NewScanner(resp.Body)}
}

// TestServe_StreamLive: a stream opened with no cursor sends what is
// committed after it opened, woken by the journal's watch (no timer in
// serve reads the journal): the event, then the status it led to.
func TestServe_StreamLive(t *testing.T) {
	f := newServeFixture(t)
	f.cli("add", "--id", "old")
	r := f.stream("/api/stream")
	// The stream is open once the status code came; what is committed now
	// is after its cursor.
	f.cli("add", "--id", "new")
	ev, data := r.next()
	var e eventJSON
	if err := json.Unmarshal([]byte(data), &e); ev != "event" || err != nil || e.Task != "new" || e.Type != "add" {
		t.Fatalf("first message %s %s, want the add of new", ev, data)
	}
	ev, data = r.next()
	var st statusJSON
	if err := json.Unmarshal([]byte(data), &st); ev != "status" || err != nil || st.Counts["available"] != 2 {
		t.Fatalf("second message %s %s, want a status with 2 available", ev, data)
	}
	f.cli("claim", "new", "--agent", "a9")
	if ev, data = r.next(); ev != "event" || !strings.Contains(data, `"agent":"a9"`) {
		t.Fatalf("after the claim: %s %s", ev, data)
	}
}

// TestServe_Metrics: /metrics parses with Prometheus's own parser and
// carries the Go and process collectors of the client library; the
// counts come from the journal's log, so a new serve (a restart) shows
// the same; the commit latency observes the events committed while it
// runs, not the backlog.
func TestServe_Metrics(t *testing.T) {
	f := newServeFixture(t)
	f.cli("add", "--id", "t1")
	f.cli("add", "--id", "t2", "--max-attempts", "1")
	f.cli("add", "--id", "t3")
	var cl claimJSON
	json.Unmarshal([]byte(f.cli("claim", "t2", "--json")), &cl)
	f.cli("fail", "t2", "--token", jsonNum(cl.Token))
	f.cli("claim", "t1", "--agent", "a1")
	f.cli("revoke", "t1")
	f.cli("claim", "t1", "--agent", "a1", "--ttl", "2m")

	m := f.metrics()
	want := map[string]float64{
		`fencectl_tasks{state="available"}`:                 1,
		`fencectl_tasks{state="claimed"}`:                   1,
		`fencectl_tasks{state="failed"}`:                    1,
		`fencectl_tasks{state="done"}`:                      0,
		`fencectl_events_total{type="claim"}`:               3,
		`fencectl_events_total{type="add"}`:                 3,
		`fencectl_tasks_failed_total{by="fail"}`:            1,
		`fencectl_lease_ends_total{by="revoke"}`:            1,
		`fencectl_lease_ends_total{by="fail"}`:              1,
		`fencectl_lease_ends_total{by="complete"}`:          0, // known ways start at 0
		`fencectl_tasks_failed_total{by="cancel"}`:          0,
		`fencectl_journal_last_seq`:                         8,
		`fencectl_lease_time_left_seconds_count`:            1,
		`fencectl_lease_time_left_seconds_bucket{le="60"}`:  0,
		`fencectl_lease_time_left_seconds_bucket{le="300"}`: 1,
		`fencectl_commit_observed_seconds_count`:            -1, // checked below
	}
	for k, v := range want {
		if v < 0 {
			continue
		}
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if m["fencectl_journal_bytes"] <= 0 {
		t.Errorf("fencectl_journal_bytes = %v", m["fencectl_journal_bytes"])
	}
	if m["go_goroutines"] <= 0 || m["process_start_time_seconds"] <= 0 {
		t.Errorf("the Go and process collectors are missing: go_goroutines %v, process_start_time_seconds %v", m["go_goroutines"], m["process_start_time_seconds"])
	}
	if m["fencectl_oldest_available_age_seconds"] < 0 {
		t.Errorf("oldest available age = %v", m["fencectl_oldest_available_age_seconds"])
	}

	// A restart: the same counts, read from the log; nothing observed yet.
	f.start()
	again := f.metrics()
	for _, k := range []string{`fencectl_events_total{type="claim"}`, `fencectl_tasks_failed_total{by="fail"}`, `fencectl_lease_ends_total{by="revoke"}`} {
		if again[k] != m[k] {
			t.Errorf("after a restart %s = %v, was %v", k, again[k], m[k])
		}
	}
	if again["fencectl_commit_observed_seconds_count"] != 0 {
		t.Errorf("the backlog was observed as commit latency: %v", again["fencectl_commit_observed_seconds_count"])
	}
	// A commit while serving is observed (the stream waits for it).
	r := f.stream("/api/stream")
	f.cli("add", "--id", "t4")
	r.next()
	if got := f.metrics()["fencectl_commit_observed_seconds_count"]; got != 1 {
		t.Errorf("commit latency observed %v events, want 1", got)
	}
}

// metrics scrapes /metrics, parses it with expfmt and returns every
// sample by its name and labels (`name{k="v"}`).
func (f *serveFixture) metrics() map[string]float64 {
	f.t.Helper()
	resp, body := f.get("/metrics", 200)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		f.t.Errorf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		f.t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	out := map[string]float64{}
	for name, fam := range fams {
		if fam.GetHelp() == "" {
			f.t.Errorf("%s has no help", name)
		}
		for _, m := range fam.Metric {
			switch fam.GetType() {
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[name+"_count"] = float64(h.GetSampleCount())
				for _, b := range h.Bucket {
					out[name+`_bucket{le="`+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)+`"}`] = float64(b.GetCumulativeCount())
				}
			default:
				key := name
				if len(m.Label) > 0 {
					key += "{"
					for i, l := range m.Label {
						if i > 0 {
							key += ","
						}
						key += l.GetName() + `="` + l.GetValue() + `"`
					}
					key += "}"
				}
				out[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return out
}
