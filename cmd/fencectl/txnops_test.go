package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
)

// TestEtcdSmallTxnOps_Commands runs, through the real binary, the commands
// whose commits grow with the data on an etcd that takes etcd.MinTxnOps
// operations a transaction (its default is 128; operators lower it):
// complete of a task 60 others wait for (all 60 available when it
// returns), claim --batch, and reap of 60 leases that ran out together.
// Each process learns the limit anew from etcd's refusals. replay --check
// agrees after each.
func TestEtcdSmallTxnOps_Commands(t *testing.T) {
	const n = 60
	c := etcdtest.StartWith(t, 1, etcdtest.Options{MaxTxnOps: etcd.MinTxnOps})
	journal := "etcd://" + strings.Join(c.Endpoints(), ",") + "/small"
	dir := filepath.Join(t.TempDir(), "tree")
	run := func(args ...string) string {
		t.Helper()
		cmd := fencectlCmd(dir, args...)
		cmd.Env = append(cmd.Env, "FENCE_JOURNAL="+journal)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("fencectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	counts := func() map[string]int {
		t.Helper()
		var st struct {
			Counts map[string]int `json:"counts"`
		}
		out := run("status", "--json")
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return st.Counts
	}
	agree := func(after string) {
		t.Helper()
		if out := run("replay", "--check"); !strings.Contains(out, "tree and journal agree") {
			t.Errorf("replay --check after %s:\n%s", after, out)
		}
	}
	files := func(sub string) int {
		entries, _ := os.ReadDir(filepath.Join(dir, sub))
		return len(entries)
	}

	run("init", "--retry-backoff", "0s") // a reaped task is available again at once
	run("add", "--id", "root")
	for i := range n {
		run("add", "--id", fmt.Sprintf("d%02d", i), "--after", "root")
	}
	var claim struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(run("claim", "root", "--json")), &claim); err != nil {
		t.Fatal(err)
	}
	run("complete", "root", "--token", fmt.Sprint(claim.Token))
	if got := counts(); got["available"] != n || got["waiting"] != 0 {
		t.Errorf("after complete root: %v, want all %d dependents available", got, n)
	}
	if a, w := files("available"), files("waiting"); a != n || w != 0 {
		t.Errorf("after complete root: %d files in available/, %d in waiting/; want %d and 0", a, w, n)
	}
	agree("complete")

	for claimed := 0; claimed < n; {
		var res struct {
			Assigned []json.RawMessage `json:"assigned"`
		}
		out := run("claim", "--batch", fmt.Sprint(n), "--agent", "fleet", "--json")
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Assigned) == 0 {
			t.Fatalf("claim --batch %d after %d claimed none (%v):\n%s", n, claimed, err, out)
		}
		claimed += len(res.Assigned)
	}
	if got := counts(); got["claimed"] != n {
		t.Errorf("after claim --batch: %v, want all %d claimed", got, n)
	}
	agree("claim --batch")

	// Every lease runs out at once, as etcd ends them: the liveness keys
	// go, and so does the mark of a recent sweep.
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range []string{"/small/l/", "/small/m/sweep"} {
		if _, err := cli.Delete(ctx, k, clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	out := run("reap")
	if got := strings.Count(out, ": lease of fleet "); got != n {
		t.Errorf("reap reported %d leases, want %d:\n%s", got, n, out)
	}
	if got := counts(); got["claimed"] != 0 || got["available"] != n {
		t.Errorf("after reap: %v, want all %d available", got, n)
	}
	agree("reap")
}
