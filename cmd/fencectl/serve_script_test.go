package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// The scripts' HTTP commands, for serve: a background serve writes its
// address with --addr-file, waitfile waits for it, and httpget and
// httpstream talk to it.

// waitfile FILE [VAR]: wait (up to 20s) until FILE exists and is not
// empty; with VAR, set $VAR to its first line.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waitfile FILE [VAR]")
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 {
			if len(args) == 2 {
				ts.Setenv(args[1], strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
			}
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitfile: %s did not appear", args[0])
		}
		time.Sleep(10 * time.Millisecond) // a test helper waiting for a process to start
	}
}

// httpget [-status N] [-method M] [-host H] ADDRFILE PATH: GET (or M)
// http://ADDR/PATH (ADDR: the first line of ADDRFILE), with H as the Host
// header if given (as a browser sends a name that resolves to ADDR); the
// body goes to stdout, the status line and the headers (sorted, "Key:
// value") to stderr. The status must be N (default 200).
func cmdHTTPGet(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("httpget", flag.ContinueOnError)
	want := fs.Int("status", 200, "")
	method := fs.String("method", http.MethodGet, "")
	host := fs.String("host", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 2 {
		ts.Fatalf("usage: httpget [-status N] [-method M] [-host H] ADDRFILE PATH")
	}
	req, err := http.NewRequest(*method, baseURL(ts, fs.Arg(0))+fs.Arg(1), nil)
	ts.Check(err)
	req.Host = *host
	resp, err := http.DefaultClient.Do(req)
	ts.Check(err)
	defer resp.Body.Close()
	if resp.StatusCode != *want && resp.Header.Get("Content-Type") == "text/event-stream" {
		ts.Fatalf("%s %s: status %d (an event stream, whose body never ends), want %d", *method, fs.Arg(1), resp.StatusCode, *want)
	}
	body, err := io.ReadAll(resp.Body)
	ts.Check(err)
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "status %d\n", resp.StatusCode)
	var keys []string
	for k := range resp.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range resp.Header[k] {
			fmt.Fprintf(&hdr, "%s: %s\n", k, v)
		}
	}
	fmt.Fprint(ts.Stdout(), string(body))
	fmt.Fprint(ts.Stderr(), hdr.String())
	if resp.StatusCode != *want {
		ts.Fatalf("%s %s: status %d, want %d\n%s", *method, fs.Arg(1), resp.StatusCode, *want, body)
	}
}

// httpstream ADDRFILE PATH N: read the server-sent events of PATH until N
// "event" messages came (up to 20s), then print what was read to stdout.
func cmdHTTPStream(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: httpstream ADDRFILE PATH N")
	}
	n, err := strconv.Atoi(args[2])
	ts.Check(err)
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Get(baseURL(ts, args[0]) + args[1])
	ts.Check(err)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		ts.Fatalf("GET %s: status %d\n%s", args[1], resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		ts.Fatalf("GET %s: Content-Type %q, want text/event-stream", args[1], ct)
	}
	var got strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	seen := 0
	for seen < n && sc.Scan() {
		line := sc.Text()
		got.WriteString(line + "\n")
		if line == "event: event" {
			seen++
		}
	}
	// The data line of the last event.
	for sc.Scan() {
		got.WriteString(sc.Text() + "\n")
		if sc.Text() == "" {
			break
		}
	}
	fmt.Fprint(ts.Stdout(), got.String())
	if seen < n {
		ts.Fatalf("GET %s: %d events of %d before the stream ended: %v\n%s", args[1], seen, n, sc.Err(), got.String())
	}
}

func baseURL(ts *testscript.TestScript, addrFile string) string {
	b, err := os.ReadFile(ts.MkAbs(addrFile))
	ts.Check(err)
	return "http://" + strings.TrimSpace(string(b))
}

// waitfor FILE REGEXP: wait (up to 20s) until FILE's content matches
// REGEXP (multi-line mode): the output of a background command that keeps
// running (log --follow, status --watch) reached that point.
func cmdWaitFor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitfor FILE REGEXP")
	}
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if re.Match(b) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitfor: %s does not match %q after 20s:\n%s", args[0], args[1], b)
		}
		time.Sleep(10 * time.Millisecond) // a test helper waiting for another process's output
	}
}
