package main

import (
	"context"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/fence"
)

// treeEtcd connects to the etcd journal of $FENCE_DIR's tree and returns
// the client, the tree's prefix, a context for the calls and what closes
// them; cmd names the script command, for its failure.
func treeEtcd(ts *testscript.TestScript, cmd string) (*clientv3.Client, string, context.Context, func()) {
	cfg, found, err := fence.TreeJournal(ts.Getenv("FENCE_DIR"))
	ts.Check(err)
	if !found {
		ts.Fatalf("%s: the tree has no etcd journal", cmd)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second})
	ts.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	return cli, cfg.Prefix, ctx, func() { cancel(); cli.Close() }
}

// cmdEtcdWipe: etcdwipe [PREFIX-SUFFIX] deletes every key of the tree's
// etcd journal ($FENCE_DIR's .fence/journal.json), as an operator's
// mistake or a cluster rebuilt from nothing would: recover's case.
func cmdEtcdWipe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: etcdwipe")
	}
	cli, prefix, ctx, done := treeEtcd(ts, "etcdwipe")
	defer done()
	resp, err := cli.Delete(ctx, prefix+"/", clientv3.WithPrefix())
	ts.Check(err)
	if resp.Deleted == 0 {
		ts.Fatalf("etcdwipe: nothing under %s/", prefix)
	}
}

// cmdEtcdExpire: etcdexpire [ID...] ends the etcd leases of the tasks'
// claims now, as etcd does when a TTL runs out (it deletes the liveness
// key, and the mark of a recent sweep: journal/etcd/sweep.go): the etcd twin of moving the test clock past a deadline, which on
// an etcd tree decides nothing. Without ids: every claim whose recorded
// deadline is at or before $FENCE_TEST_NOW.
func cmdEtcdExpire(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("usage: etcdexpire [ID...]")
	}
	explicit := len(args) > 0
	if !explicit {
		args = dueLeases(ts)
	}
	cli, prefix, ctx, done := treeEtcd(ts, "etcdexpire")
	defer done()
	// Time passes for etcd: the mark of a recent sweep (its lease is a
	// second or two) runs out too, so the next claim sweeps.
	_, err := cli.Delete(ctx, prefix+"/m/sweep")
	ts.Check(err)
	for _, id := range args {
		resp, err := cli.Delete(ctx, prefix+"/l/"+id)
		ts.Check(err)
		if resp.Deleted == 0 && explicit {
			ts.Fatalf("etcdexpire: %s holds no live lease", id)
		}
	}
}

// dueLeases returns the claimed tasks whose recorded deadline is at or
// before $FENCE_TEST_NOW.
func dueLeases(ts *testscript.TestScript) []string {
	now, err := time.Parse(time.RFC3339Nano, ts.Getenv("FENCE_TEST_NOW"))
	if err != nil {
		ts.Fatalf("etcdexpire without ids needs FENCE_TEST_NOW: %v", err)
	}
	tree, err := fence.Open(ts.Getenv("FENCE_DIR"), fence.Options{})
	ts.Check(err)
	defer tree.Close()
	st, err := tree.Status(context.Background())
	ts.Check(err)
	var due []string
	for _, l := range st.Leases {
		if !now.Before(l.Deadline) {
			due = append(due, l.Task)
		}
	}
	return due
}
