//go:build !noserve

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds a headless-capable Chromium: Debian's chromium
// package, or what CHROMIUM names.
func chromiumPath() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestServe_Browser drives the dashboard in headless Chromium, against
// serve and the CLI as real processes: the page shows the counts; a claim
// made by `fencectl claim` appears in the leases while the page stays
// open (the event stream, not a reload); an agent name full of markup is
// shown as text and runs nothing; the task's link opens its page. With
// FENCE_DASHBOARD_PNG set, it saves a screenshot of the page there (make
// screenshot: docs/dashboard.png).
func TestServe_Browser(t *testing.T) {
	chromium := chromiumPath()
	if chromium == "" {
		t.Skip("headless Chromium not found (install Debian's chromium package, or set CHROMIUM): the dashboard's browser test did not run")
	}
	dir := filepath.Join(t.TempDir(), "tree")
	cli := func(args ...string) string {
		t.Helper()
		out, err := fencectlCmd(dir, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("fencectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	cli("init")
	for _, id := range []string{"build-1", "build-2", "build-3", "lint", "deploy"} {
		cli("add", "--id", id)
	}
	// A failed task, and a revoked lease (a token ended: marked in the feed).
	cli("add", "--id", "flaky", "--max-attempts", "1")
	var flaky claimJSON
	if err := json.Unmarshal([]byte(cli("claim", "flaky", "--agent", "ci-4", "--json")), &flaky); err != nil {
		t.Fatal(err)
	}
	cli("fail", "flaky", "--token", jsonNum(flaky.Token), "--reason", "exit 1: 3 tests failed")
	cli("claim", "deploy", "--agent", "ci-9")
	cli("revoke", "deploy", "--reason", "host drained")
	const hostile = `ci-<img src=x onerror="window.pwned=1">"'` + "<script>window.pwned=2</script>"
	cli("claim", "build-1", "--agent", hostile, "--ttl", "40s")
	cli("claim", "build-2", "--agent", "ci-2")
	addrFile := filepath.Join(t.TempDir(), "addr")
	srv := fencectlCmd(dir, "serve", "--http", "127.0.0.1:0", "--addr-file", addrFile)
	var serveErr strings.Builder
	srv.Stderr = &serveErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGINT)
		if err := srv.Wait(); err != nil {
			t.Errorf("serve: %v\n%s", err, serveErr.String())
		}
	})
	addr := waitAddr(t, addrFile)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1300, 820))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	do := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		if _, err := chromedp.Run(ctx, a); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, serveErr.String())
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}

	do("load the page", chromedp.Navigate("http://"+addr+"/"))
	do("see the leases", chromedp.WaitVisible(`#leases tbody tr[data-task="build-2"]`))
	do("see the stream open", chromedp.WaitVisible(`#live:not(.off)`))
	if f := text(`#failed tbody`); !strings.Contains(f, "flaky") || !strings.Contains(f, "exit 1: 3 tests failed") {
		t.Errorf("failed tasks: %q, want flaky with its reason", f)
	}
	if k := text(`#events tbody tr.killed`); !strings.Contains(k, "revoke") || !strings.Contains(k, "host drained") {
		t.Errorf("the revoke is not marked as a token ended: %q", k)
	}
	if a, c := text(`#count-available .n`), text(`#count-claimed .n`); a != "3" || c != "2" {
		t.Errorf("counts: available %q, claimed %q; want 3, 2", a, c)
	}
	holder := text(`#leases tbody tr[data-task="build-1"] td:nth-child(2)`)
	pwned, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.pwned !== undefined`))
	if err != nil {
		t.Fatal(err)
	}
	made, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("main img, main script").length`))
	if err != nil {
		t.Fatal(err)
	}
	if holder != hostile || pwned || made != 0 {
		t.Errorf("the hostile agent name: shown %q, ran script %v, made %d elements", holder, pwned, made)
	}

	// A claim by another process shows up live, with no reload.
	do("mark the page", chromedp.Evaluate[chromedp.Void](`window.sameLoad = true`))
	cli("claim", "lint", "--agent", "ci-3")
	do("see the claim appear", chromedp.WaitVisible(`#leases tbody tr[data-task="lint"]`))
	do("see the count move", chromedp.WaitVisible(`#count-claimed[data-n="3"]`))
	if top := text(`#events tbody tr:first-child`); !strings.Contains(top, "claim") || !strings.Contains(top, "ci-3") {
		t.Errorf("newest event %q, want lint's claim by ci-3", top)
	}
	same, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.sameLoad === true`))
	if err != nil || !same {
		t.Errorf("the page was reloaded (%v): the claim must come through the stream", err)
	}
	if png := os.Getenv("FENCE_DASHBOARD_PNG"); png != "" {
		do("let the highlight fade", chromedp.Sleep(2500*time.Millisecond)) // the screenshot only
		shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(png, shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The task's link opens its page.
	do("follow the task link", chromedp.Click(`#leases tbody tr[data-task="lint"] a`))
	do("see the task page", chromedp.WaitVisible(`#record dd`))
	if title, record := text(`#task-title`), text(`#record`); title != "lint" || !strings.Contains(record, "ci-3") || !strings.Contains(record, "claimed") {
		t.Errorf("task page: title %q, record %q", title, record)
	}
}

// waitAddr waits for serve's --addr-file.
func waitAddr(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(10 * time.Millisecond) // waiting for a process to start
	}
	t.Fatal("serve wrote no address")
	return ""
}
