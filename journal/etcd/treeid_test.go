package etcd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
	"github.com/fencectl/fencectl/journal/record"
)

// makeJournal makes a journal with cfg as init does: the config, with the
// id the journal will have, written in dir first. It returns the config
// written.
func makeJournal(t *testing.T, cfg journal.Config, dir string) journal.Config {
	t.Helper()
	b, err := etcd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lock, err := b.LockTree(dir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	cfg.TreeID = lock.(interface{ NewTreeID() string }).NewTreeID()
	if err := journal.WriteConfig(dir, cfg); err != nil {
		t.Fatal(err)
	}
	if err := lock.Create(record.Defaults{TTL: time.Minute, MaxAttempts: 3}, 1); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// twoTrees starts an etcd member and returns a config of prefix on it
// and the .fence directories of two trees that will use it in turn.
func twoTrees(t *testing.T, prefix string) (base journal.Config, dirA, dirB string) {
	t.Helper()
	base = journal.Config{Backend: "etcd", Endpoints: etcdtest.Start(t, 1).Endpoints(), Prefix: prefix}
	dirA = filepath.Join(t.TempDir(), ".fence")
	dirB = filepath.Join(t.TempDir(), ".fence")
	for _, d := range []string{dirA, dirB} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return base, dirA, dirB
}

func wipe(t *testing.T, cfg journal.Config) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Delete(ctx, cfg.Prefix+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

func openErr(b *etcd.Backend, dir string) error {
	s, err := b.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: 5 * time.Second})
	if err == nil {
		s.Close()
	}
	return err
}

// TestBackend_OpenRefusesAnotherTreesJournal: a backend made from a tree's
// config opens only the journal that config names by its tree id. After
// the prefix was wiped and another tree made a journal there, Open is
// refused with a *TreeMismatchError naming both ids; once the tree's own
// config records the journal there (a recover by another process), the
// same backend opens it; a config with no tree id checks nothing.
func TestBackend_OpenRefusesAnotherTreesJournal(t *testing.T) {
	base, dirA, dirB := twoTrees(t, "/shared")
	cfgA := makeJournal(t, base, dirA)
	a, err := etcd.New(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := openErr(a, dirA); err != nil {
		t.Fatalf("tree A opens its own journal: %v", err)
	}

	wipe(t, base)
	cfgB := makeJournal(t, base, dirB)
	err = openErr(a, dirA)
	var mismatch *journal.TreeMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("tree A opens tree B's journal: err = %v, want a *TreeMismatchError", err)
	}
	if mismatch.Found != cfgB.TreeID || mismatch.Want != cfgA.TreeID {
		t.Errorf("mismatch found %s, want %s; expected found %s, want %s", mismatch.Found, mismatch.Want, cfgB.TreeID, cfgA.TreeID)
	}

	legacy := base // a config written before tree ids were recorded
	old, err := etcd.New(legacy)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := openErr(old, dirA); err != nil {
		t.Errorf("a config with no tree id: %v, want no check", err)
	}

	// Tree A's journal is made again (as recover does, in another
	// process): A's config now names it, and the backend A made before
	// follows the config.
	wipe(t, base)
	cfgA2 := makeJournal(t, base, dirA)
	if cfgA2.TreeID == cfgA.TreeID {
		t.Fatal("a new journal has the old tree id")
	}
	if err := openErr(a, dirA); err != nil {
		t.Errorf("tree A after its journal was made again: %v", err)
	}
}

// TestStore_HandleRefusesAnotherTreesJournal: a handle opened on the tree's
// own journal (a long-lived process: run --loop, mcp, serve) checks the
// tree id at every snapshot, not only at Open: once another tree's journal
// took the wiped prefix, its reads and writes are refused.
func TestStore_HandleRefusesAnotherTreesJournal(t *testing.T) {
	base, dirA, dirB := twoTrees(t, "/held")
	cfgA := makeJournal(t, base, dirA)
	a, err := etcd.New(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s, err := a.Open(dirA, journal.OpenOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.View(func(journal.Tx) error { return nil }); err != nil {
		t.Fatalf("tree A reads its own journal: %v", err)
	}

	wipe(t, base)
	makeJournal(t, base, dirB)
	var mismatch *journal.TreeMismatchError
	if err := s.View(func(tx journal.Tx) error { _, err := tx.Defaults(); return err }); !errors.As(err, &mismatch) {
		t.Fatalf("a handle of tree A reads tree B's journal: err = %v, want a *TreeMismatchError", err)
	}
	if err := s.Update(func(tx journal.Tx) error { _, err := tx.NextToken(time.Now()); return err }); !errors.As(err, &mismatch) {
		t.Fatalf("a handle of tree A writes tree B's journal: err = %v, want a *TreeMismatchError", err)
	}
}
