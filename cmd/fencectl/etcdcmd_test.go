package main

import (
	"context"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/fence"
)

// cmdEtcdWipe: etcdwipe [PREFIX-SUFFIX] deletes every key of the tree's
// etcd journal ($FENCE_DIR's .fence/journal.json), as an operator's
// mistake or a cluster rebuilt from nothing would: recover's case.
func cmdEtcdWipe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: etcdwipe")
	}
	cfg, found, err := fence.TreeJournal(ts.Getenv("FENCE_DIR"))
	ts.Check(err)
	if !found {
		ts.Fatalf("etcdwipe: the tree has no etcd journal")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second})
	ts.Check(err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Delete(ctx, cfg.Prefix+"/", clientv3.WithPrefix())
	ts.Check(err)
	if resp.Deleted == 0 {
		ts.Fatalf("etcdwipe: nothing under %s/", cfg.Prefix)
	}
}

// cmdEtcdExpire: etcdexpire [ID...] ends the etcd leases of the tasks'
// claims now, as etcd does when a TTL runs out (it deletes the liveness
// key): the etcd twin of moving the test clock past a deadline, which on
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
	cfg, found, err := fence.TreeJournal(ts.Getenv("FENCE_DIR"))
	ts.Check(err)
	if !found {
		ts.Fatalf("etcdexpire: the tree has no etcd journal")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second})
	ts.Check(err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range args {
		resp, err := cli.Delete(ctx, cfg.Prefix+"/l/"+id)
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
