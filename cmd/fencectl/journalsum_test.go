package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/fence"
)

// cmdJournalSum: journalsum prints a fingerprint of everything the tree's
// journal holds, to compare before and after a command that must change
// nothing: on bbolt the bytes of .fence/journal.db and of the mirror mark
// (.fence/mirrored); on etcd every key under the tree's prefix with the
// revision that last wrote it (a commit, even an empty one, would move a
// key's revision; the cluster's own revision is shared with other trees),
// but the sweep marker (journal/etcd/sweep.go): it lives under a lease of
// about a second, which etcd ends on its own clock, so a script slowed
// down (the race detector, a loaded machine) saw it vanish between two
// sums with nothing written. A commit that wrote it would show all the
// same: every commit rewrites the head.
func cmdJournalSum(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: journalsum")
	}
	dir := ts.Getenv("FENCE_DIR")
	if _, found, err := fence.TreeJournal(dir); err != nil || found {
		ts.Check(err)
		cli, prefix, ctx, done := treeEtcd(ts, "journalsum")
		defer done()
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		ts.Check(err)
		var b strings.Builder
		for _, kv := range resp.Kvs {
			if strings.HasSuffix(string(kv.Key), "/m/sweep") {
				continue
			}
			fmt.Fprintf(&b, "%s %d\n", kv.Key, kv.ModRevision)
		}
		ts.Stdout().Write([]byte(b.String()))
		return
	}
	for _, name := range []string{"journal.db", "mirrored"} {
		data, err := os.ReadFile(filepath.Join(dir, ".fence", name))
		if os.IsNotExist(err) {
			fmt.Fprintf(ts.Stdout(), "%s absent\n", name)
			continue
		}
		ts.Check(err)
		fmt.Fprintf(ts.Stdout(), "%s %x\n", name, sha256.Sum256(data))
	}
}
