//go:build !noserve

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// errorBody decodes an answer of the API that must be the --json error
// object.
func errorBody(t *testing.T, what, body string) errorObject {
	t.Helper()
	var eo errorObject
	if err := json.Unmarshal([]byte(body), &eo); err != nil || eo.Code == 0 || eo.Reason == "" || eo.Message == "" {
		t.Fatalf("%s: not an error object (%v): %s", what, err, body)
	}
	return eo
}

// TestServe_LoopbackHostOnly: a serve on a loopback address answers only
// Host names that cannot be rebound to it, on every path (DNS rebinding:
// a page whose name was made to resolve to 127.0.0.1 must read nothing);
// the refusal says which names are answered. A serve on another address
// answers any Host.
func TestServe_LoopbackHostOnly(t *testing.T) {
	f := newServeFixture(t)
	f.cli("add", "--id", "t1")
	paths := []string{"/", "/task/t1", "/static/app.js", "/api/status", "/api/tasks", "/api/tasks/t1",
		"/api/tasks/t1/outputs", "/api/tasks/t1/outputs/x", "/api/events?after=0", "/api/stream", "/metrics"}
	for _, host := range []string{"evil.example", "evil.example:7070", "127.0.0.1.nip.io", "localhost.evil.example", "10.0.0.1"} {
		for _, p := range paths {
			_, body := f.do("GET", p, host, 421)
			if !strings.Contains(body, "localhost, *.localhost, 127.0.0.0/8 and [::1]") || strings.Contains(body, "t1") {
				t.Errorf("GET %s (Host %s): %s", p, host, body)
			}
			if strings.HasPrefix(p, "/api/") {
				if eo := errorBody(t, p, body); eo.Reason != fence.ReasonInvalidInput {
					t.Errorf("GET %s (Host %s): reason %q", p, host, eo.Reason)
				}
			}
		}
	}
	for _, host := range []string{"localhost", "LOCALHOST:7070", "localhost.", "dash.localhost", "dash.localhost:1", "127.0.0.1", "127.9.9.9:80", "[::1]", "[::1]:7070"} {
		f.do("GET", "/api/status", host, 200)
		f.do("GET", "/metrics", host, 200)
	}

	open := httptest.NewServer(newServer(f.tree, &output{stdout: io.Discard, stderr: io.Discard}, false, 0).routes())
	defer open.Close()
	if _, body := doHTTP(t, open.URL, "GET", "/api/tasks/t1", "evil.example", 200); !strings.Contains(body, `"task":"t1"`) {
		t.Errorf("a serve not on loopback: %s", body)
	}
}

// TestServe_MethodNotAllowed: another method than GET (or HEAD) on an
// endpoint of the API is 405 with Allow, as outside the API, and the
// answer is the error object; an unknown endpoint stays 400.
func TestServe_MethodNotAllowed(t *testing.T) {
	f := newServeFixture(t)
	f.cli("add", "--id", "t1")
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		for _, p := range []string{"/api/status", "/api/tasks", "/api/tasks/t1", "/api/tasks/t1/outputs",
			"/api/tasks/t1/outputs/x", "/api/events", "/api/stream"} {
			resp, body := f.do(m, p, "", 405)
			if a := resp.Header.Get("Allow"); a != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q", m, p, a)
			}
			eo := errorBody(t, m+" "+p, body)
			if eo.Reason != fence.ReasonInvalidInput || !strings.Contains(eo.Message, m) || !strings.Contains(eo.Message, p) {
				t.Errorf("%s %s: %+v", m, p, eo)
			}
		}
	}
	f.do("HEAD", "/api/status", "", 200)
	if resp, _ := f.do("POST", "/", "", 405); resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: Allow %q", resp.Header.Get("Allow"))
	}
	for _, m := range []string{"GET", "POST"} {
		if _, body := f.do(m, "/api/nothing", "", 404); !strings.Contains(body, "no such API endpoint") {
			t.Errorf("%s /api/nothing: %s", m, body)
		}
	}
}

// TestServe_EventsQuery: ?task names a task that must exist, with ?after
// or without; ?heartbeats is a boolean spelt as the CLI's flags take it,
// the same on the stream, and anything else is refused, not read as
// false; heartbeats left out still count towards ?limit and move
// Fence-Last-Seq on.
func TestServe_EventsQuery(t *testing.T) {
	f := newServeFixture(t)
	f.cli("add", "--id", "t1")
	var cl claimJSON
	if err := json.Unmarshal([]byte(f.cli("claim", "t1", "--json")), &cl); err != nil {
		t.Fatal(err)
	}
	f.cli("heartbeat", "t1", "--token", jsonNum(cl.Token))
	f.cli("heartbeat", "t1", "--token", jsonNum(cl.Token))
	f.cli("add", "--id", "t2") // seq 5

	for _, p := range []string{"/api/events?task=nope", "/api/events?task=nope&after=0", "/api/events?task=nope&after=3&limit=0"} {
		_, body := f.get(p, 404)
		if eo := errorBody(t, p, body); eo.Reason != fence.ReasonNoSuchTask || eo.Task != "nope" {
			t.Errorf("GET %s: %+v", p, eo)
		}
	}
	for _, v := range []string{"yes", "no", "on", "2", "truee"} {
		for _, p := range []string{"/api/events?heartbeats=", "/api/events?after=0&heartbeats=", "/api/stream?heartbeats="} {
			_, body := f.get(p+v, 400)
			eo := errorBody(t, p+v, body)
			if want := fmt.Sprintf(`invalid heartbeats=%q: give true or false`, v); !strings.HasPrefix(eo.Message, want) {
				t.Errorf("GET %s: %q, want it to start %q", p+v, eo.Message, want)
			}
		}
	}
	types := func(path string) string {
		t.Helper()
		var evs []eventJSON
		f.getJSON(path, &evs)
		var ts []string
		for _, e := range evs {
			ts = append(ts, e.Type)
		}
		return strings.Join(ts, " ")
	}
	for _, v := range []string{"&heartbeats", "&heartbeats=1", "&heartbeats=true", "&heartbeats=TRUE", "&heartbeats=t"} {
		for _, p := range []string{"/api/events?after=0", "/api/events?limit=0"} {
			if got := types(p + v); got != "add claim heartbeat heartbeat add" {
				t.Errorf("GET %s: %s", p+v, got)
			}
		}
	}
	for _, v := range []string{"", "&heartbeats=0", "&heartbeats=false", "&heartbeats=F"} {
		if got := types("/api/events?after=0" + v); got != "add claim add" {
			t.Errorf("GET /api/events?after=0%s: %s", v, got)
		}
	}
	resp := f.getJSON("/api/events?after=0&limit=3", new([]eventJSON))
	if last, more := resp.Header.Get("Fence-Last-Seq"), resp.Header.Get("Fence-More"); last != "3" || more != "true" {
		t.Errorf("after=0&limit=3: Fence-Last-Seq %s, Fence-More %s; want 3 (the heartbeat read), true", last, more)
	}
	if got := types("/api/events?after=0&task=t2"); got != "add" {
		t.Errorf("task=t2: %s", got)
	}
}

// TestServe_ErrorsNameQueryParameters: a refused query parameter is named
// as such (state="bogus"), as the API's own checks name limit and after,
// never by the flag of the command that shares the check (--state).
func TestServe_ErrorsNameQueryParameters(t *testing.T) {
	f := newServeFixture(t)
	for p, want := range map[string]string{
		"/api/tasks?state=bogus":     `invalid state="bogus": must be one of`,
		"/api/tasks?agent=a%01b":     `invalid agent="a\x01b": control characters`,
		"/api/tasks?after=bad%20id":  `invalid after="bad id": `,
		"/api/tasks?limit=-1":        `invalid limit="-1"`,
		"/api/events?limit=x":        `invalid limit="x"`,
		"/api/events?after=-1":       `invalid after="-1"`,
		"/api/events?heartbeats=yes": `invalid heartbeats="yes"`,
	} {
		_, body := f.get(p, 400)
		eo := errorBody(t, p, body)
		if !strings.HasPrefix(eo.Message, want) || strings.Contains(eo.Message, "--") {
			t.Errorf("GET %s: %q, want it to start %q and name no flag", p, eo.Message, want)
		}
	}
}

// TestServe_EventsPaged: one answer of /api/events holds at most
// maxEventLimit events, ?limit=0 ("all") included, so that no request
// holds the journal's lock for the whole log; Fence-More says the answer
// stopped short, and ?after=Fence-Last-Seq goes on from there, so that
// the whole log is still read, page by page.
func TestServe_EventsPaged(t *testing.T) {
	f := newServeFixture(t)
	n := maxEventLimit + 5
	for i := range n {
		if err := os.WriteFile(filepath.Join(f.dir, "inbox", fmt.Sprintf("t%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.adoptAll()
	page := func(path string) ([]eventJSON, string, string) {
		t.Helper()
		var evs []eventJSON
		resp := f.getJSON(path, &evs)
		return evs, resp.Header.Get("Fence-Last-Seq"), resp.Header.Get("Fence-More")
	}
	for _, q := range []string{"after=0&limit=0", "after=0&limit=5000", "after=0&limit=" + fmt.Sprint(maxEventLimit)} {
		evs, last, more := page("/api/events?" + q)
		if len(evs) != maxEventLimit || evs[0].Seq != 1 || last != fmt.Sprint(maxEventLimit) || more != "true" {
			t.Errorf("%s: %d events from %d, last %s, more %s", q, len(evs), evs[0].Seq, last, more)
		}
	}
	seen := 0
	for after, pages := "0", 0; ; pages++ {
		evs, last, more := page("/api/events?limit=0&after=" + after)
		seen += len(evs)
		after = last
		if more == "false" {
			if seen != n || pages != 1 || last != fmt.Sprint(n) {
				t.Errorf("paged through %d events in %d pages to %s, want %d in 2 to %d", seen, pages+1, last, n, n)
			}
			break
		}
		if pages > 2 {
			t.Fatal("paging does not end")
		}
	}
	for _, q := range []string{"limit=0", "limit=5000"} {
		evs, last, more := page("/api/events?" + q)
		if len(evs) != maxEventLimit || evs[0].Seq != uint64(n-maxEventLimit+1) || last != fmt.Sprint(n) || more != "true" {
			t.Errorf("%s: %d events from %d, last %s, more %s; want the newest %d", q, len(evs), evs[0].Seq, last, more, maxEventLimit)
		}
	}
	if _, _, more := page("/api/events?limit=" + fmt.Sprint(n)); more != "true" {
		t.Errorf("limit=%d: Fence-More %s", n, more)
	}
	if evs, _, more := page("/api/events?limit=5&after=" + fmt.Sprint(n-5)); len(evs) != 5 || more != "false" {
		t.Errorf("the last 5: %d events, more %s", len(evs), more)
	}
	// The last seq there can be: nothing follows it (after+1 wrapped round
	// to the start of the log).
	if evs, _, more := page("/api/events?after=18446744073709551615"); len(evs) != 0 || more != "false" {
		t.Errorf("after the largest seq: %d events, more %s; want none", len(evs), more)
	}
}

// TestServe_TasksPaged: one answer of /api/tasks holds at most
// maxTaskLimit tasks, ?limit=0 ("all") included, so that no request holds
// the journal's lock (and every writer) for the whole tree, nor a client
// that does not read its answer all of it in memory; Fence-More and
// ?after go on from there.
func TestServe_TasksPaged(t *testing.T) {
	f := newServeFixture(t)
	n := maxTaskLimit + 5
	for i := range n {
		if err := os.WriteFile(filepath.Join(f.dir, "inbox", fmt.Sprintf("t%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.adoptAll()
	for _, q := range []string{"limit=0", "limit=5000"} {
		var tasks []taskJSON
		resp := f.getJSON("/api/tasks?"+q, &tasks)
		if len(tasks) != maxTaskLimit || resp.Header.Get("Fence-More") != "true" {
			t.Fatalf("%s: %d tasks, more %s; want %d and more", q, len(tasks), resp.Header.Get("Fence-More"), maxTaskLimit)
		}
		var rest []taskJSON
		resp = f.getJSON("/api/tasks?limit=0&after="+tasks[len(tasks)-1].Task, &rest)
		if len(rest) != 5 || resp.Header.Get("Fence-More") != "false" {
			t.Errorf("%s, second page: %d tasks, more %s; want the last 5", q, len(rest), resp.Header.Get("Fence-More"))
		}
	}
}

// TestServe_ReadsTakeTurns: serve runs one read of the journal at a
// time, so that many clients queue inside serve instead of each holding
// the journal's shared lock, which kept writers (claims by other
// processes) out until they gave up busy. While a read runs, each
// endpoint that reads the journal answers busy once its wait (the lock's
// --timeout) is over; the turn given back, it answers again.
func TestServe_ReadsTakeTurns(t *testing.T) {
	f := newServeFixtureTimeout(t, 10*time.Millisecond)
	f.cli("add", "--id", "t1")
	f.srv.tree.turns <- struct{}{} // as if a read were running
	for _, p := range []string{"/api/status", "/api/tasks", "/api/tasks/t1", "/api/tasks/t1/outputs",
		"/api/tasks/t1/outputs/x", "/api/events", "/api/events?after=0", "/api/events?after=0&task=t1", "/api/stream"} {
		_, body := f.get(p, 503)
		if eo := errorBody(t, p, body); eo.Reason != fence.ReasonBusy {
			t.Errorf("GET %s: %+v", p, eo)
		}
	}
	if _, body := f.get("/metrics", 503); !strings.Contains(body, "busy") {
		t.Errorf("GET /metrics: %s", body)
	}
	<-f.srv.tree.turns
	f.get("/api/status", 200)
	f.get("/api/events?after=0", 200)
}
