package etcd

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
)

// A watch that etcd cancels (here: the member restarted, and the revision
// the client resumes from was compacted meanwhile) is made again, and its
// reader is woken: before, the watch's goroutine ended with it, and log
// --follow and status --watch stopped updating for good, silently (found
// from outside, 4 times in 9).
func TestWatch_GoesOnAfterItsRevisionIsCompacted(t *testing.T) {
	c := etcdtest.Start(t, 3)
	a := c.Members()[0]
	var others []string
	for _, m := range c.Members()[1:] {
		others = append(others, m.ClientURL)
	}
	// The watch's client knows member a alone; the writes go to the others.
	cfg := journal.Config{Backend: "etcd", Endpoints: []string{a.ClientURL}, Prefix: "/w"}
	dir := createJournal(t, cfg)
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w, err := b.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: others, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	woken := func(what string) {
		t.Helper()
		select {
		case <-w.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake within 10 s after %s", what)
		}
	}
	drain := func() {
		for range len(w.C()) {
			<-w.C()
		}
	}
	if _, err := cli.Put(ctx, "/w/x/1", "a"); err != nil {
		t.Fatal(err)
	}
	woken("a put")

	// While member a is down, the tree changes and the cluster is
	// compacted past the revision the watch resumes from.
	a.Stop()
	var rev int64
	for _, k := range []string{"2", "3", "4"} {
		resp, err := cli.Put(ctx, "/w/x/"+k, "b")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the watch resumes, and etcd cancels it
	drain()
	if _, err := cli.Put(ctx, "/w/x/late", "c"); err != nil {
		t.Fatal(err)
	}
	woken("a put after the compaction")
}
