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
