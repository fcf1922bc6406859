//go:build !noserve

package main

import (
	"strings"
	"testing"
)

// TestServe_HostileText: an agent name and a reason full of markup,
// quotes and length reach the API as data, unchanged (JSON-escaped, in
// application/json that is never sniffed), and the page that shows them
// is static: no data is ever in the HTML, the script writes it with
// textContent (the browser test checks the DOM).
func TestServe_HostileText(t *testing.T) {
	f := newServeFixture(t)
	// As long as an agent name may be (256 bytes).
	hostile := `<script>alert("x")</script><img src=x onerror='alert(1)'>` + strings.Repeat("&quot;", 33) + "x"
	f.cli("add", "--id", "t1")
	f.cli("claim", "t1", "--agent", hostile)
	f.cli("revoke", "t1", "--reason", hostile)
	var evs []eventJSON
	f.getJSON("/api/events", &evs)
	if len(evs) != 3 || evs[1].Agent != hostile || evs[2].Reason != hostile {
		t.Fatalf("events = %+v", evs)
	}
	for _, p := range []string{"/", "/task/t1"} {
		resp, body := f.get(p, 200)
		if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("GET %s: Content-Type %q", p, ct)
		}
		if strings.Contains(body, "alert") || strings.Contains(body, "t1") {
			t.Errorf("GET %s: the page holds data:\n%s", p, body)
		}
	}
	js := webFile(t, "app.js")
	if strings.Contains(js, "innerHTML") || strings.Contains(js, "insertAdjacentHTML") || strings.Contains(js, "document.write") {
		t.Error("app.js writes HTML: it must build the DOM with textContent")
	}
	f.get("/task/bad%20id", 400)
	f.get("/task/..%2F..%2Fetc", 400)
}

func webFile(t *testing.T, name string) string {
	t.Helper()
	b, err := webFS.ReadFile("web/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
