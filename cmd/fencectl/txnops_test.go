package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

// TestEtcdSmallTxnOps_RecoverUnfinished runs recover, through the real
// binary, on an etcd that takes etcd.MinTxnOps operations a transaction,
// where a journal is already there, one an earlier recover did not
// finish: whole (a move failed after it), then a part of the tasks (a
// crash after the first commit). Each recover sets that journal aside
// (its checks, its copy a page at a time, its delete, each a request etcd
// takes) and rebuilds it, and the last one finishes as at etcd's default.
func TestEtcdSmallTxnOps_RecoverUnfinished(t *testing.T) {
	if testClock == nil {
		t.Skip("needs the crash points: go test -tags fencetest")
	}
	c := etcdtest.StartWith(t, 1, etcdtest.Options{MaxTxnOps: etcd.MinTxnOps})
	journal := "etcd://" + strings.Join(c.Endpoints(), ",") + "/small"
	dir := filepath.Join(t.TempDir(), "tree")
	fencectl := func(env []string, args ...string) (string, error) {
		cmd := fencectlCmd(dir, args...)
		cmd.Env = append(cmd.Env, append(env, "FENCE_JOURNAL="+journal)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := fencectl(nil, args...)
		if err != nil {
			t.Fatalf("fencectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	run("init")
	run("add", "--id", "c00")
	var old struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(run("claim", "c00", "--json")), &old); err != nil {
		t.Fatal(err)
	}
	files := map[string]int{"available": 100, "claimed": 20, "done": 10, "waiting": 5}
	for sub, n := range files {
		for i := range n {
			if err := os.WriteFile(filepath.Join(dir, sub, fmt.Sprintf("%c%03d", sub[0], i)), []byte("job\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	del := func(prefix string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	}
	del("/small/") // the journal is lost

	// The first recover rebuilds the whole journal, but a move after it
	// fails: the tree says a recover has not finished.
	if out, err := fencectl([]string{"FENCE_TEST_RENAME_FAULT=claimed/c00=EACCES"}, "recover"); err == nil || !strings.Contains(out, "recover stopped before it finished") {
		t.Fatalf("recover with a move that fails: %v, want it cut short\n%s", err, out)
	}
	// The second sets that journal aside (more keys than a request of
	// etcd.MinTxnOps holds) and dies after the first chunk of its own:
	// the journal holds a part of the tasks.
	if out, err := fencectl([]string{"FENCE_CRASH=recover:after-chunk"}, "recover"); err == nil || err.Error() != "exit status 99" {
		t.Fatalf("recover with a crash after its first chunk: %v, want exit 99\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, ".fence", "recovering")); err != nil {
		t.Fatalf("the recover cut short left no mark: %v", err)
	}
	// The dead process's tree lock goes, as when its session's lease
	// runs out.
	del("/small/lock/")

	out := run("recover", "--json")
	var rep struct {
		Counts     map[string]int `json:"counts"`
		Freed      []string       `json:"freed"`
		Released   []string       `json:"released"`
		FirstToken uint64         `json:"first_token"`
		KeptAside  string         `json:"kept_aside"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("recover --json: %v\n%s", err, out)
	}
	if rep.Counts["available"] != 126 || rep.Counts["done"] != 10 || len(rep.Freed) != 21 || len(rep.Released) != 5 || rep.KeptAside == "" {
		t.Errorf("recover of the unfinished journal: %s\nwant 126 available (21 freed, 5 released), 10 done, the unfinished journal kept aside", out)
	}
	if _, err := os.Stat(filepath.Join(dir, ".fence", "recovering")); err == nil {
		t.Error("recover finished but left its mark")
	}
	if out := run("replay", "--check"); !strings.Contains(out, "tree and journal agree") {
		t.Errorf("replay --check after recover:\n%s", out)
	}
	if out, err := fencectl(nil, "heartbeat", "c00", "--token", fmt.Sprint(old.Token)); err == nil || !strings.Contains(out, "nothing changed") {
		t.Errorf("heartbeat with the token from before the journal was lost: %v\n%s", err, out)
	}
	var next struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(run("claim", "c00", "--json")), &next); err != nil {
		t.Fatal(err)
	}
	if next.Token <= old.Token || next.Token <= rep.FirstToken {
		t.Errorf("a claim after recover got token %d, not above the old %d and the first %d", next.Token, old.Token, rep.FirstToken)
	}
}

// TestEtcdSmallTxnOps_RecoverBelowTheMinimum: on an etcd that takes fewer
// than etcd.MinTxnOps operations a transaction, a recover that would set
// a journal aside is refused before it writes anything, saying what
// fencectl needs: the journal is as it was, and no copy was made.
func TestEtcdSmallTxnOps_RecoverBelowTheMinimum(t *testing.T) {
	c := etcdtest.StartWith(t, 1, etcdtest.Options{MaxTxnOps: 8})
	journal := "etcd://" + strings.Join(c.Endpoints(), ",") + "/small"
	dir := filepath.Join(t.TempDir(), "tree")
	fencectl := func(args ...string) (string, error) {
		cmd := fencectlCmd(dir, args...)
		cmd.Env = append(cmd.Env, "FENCE_JOURNAL="+journal)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, args := range [][]string{{"init"}, {"add", "--id", "t1"}} {
		if out, err := fencectl(args...); err != nil {
			t.Fatalf("fencectl %s on etcd --max-txn-ops 8: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// A recover that did not finish: the next one sets the journal aside.
	if err := os.WriteFile(filepath.Join(dir, ".fence", "recovering"), []byte("a recover began and has not finished: run fencectl recover\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	keys := func() map[string]string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "/small", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range resp.Kvs {
			if !strings.HasPrefix(string(kv.Key), "/small/lock/") { // recover's own lock, gone when it ends
				out[string(kv.Key)] = string(kv.Value)
			}
		}
		return out
	}
	before := keys()
	out, err := fencectl("recover")
	if err == nil || !strings.Contains(out, fmt.Sprintf("fencectl needs %d at least", etcd.MinTxnOps)) {
		t.Errorf("recover on etcd --max-txn-ops 8: %v, want a refusal saying fencectl needs %d\n%s", err, etcd.MinTxnOps, out)
	}
	if after := keys(); !maps.Equal(before, after) {
		t.Errorf("the refused recover changed etcd: %d keys before, %d after", len(before), len(after))
	}
}
