package journaltest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	etcdstore "github.com/fencectl/fencectl/journal/etcd"
	"github.com/fencectl/fencectl/journal/etcd/etcdtest"
	"github.com/fencectl/fencectl/journal/journaltest"
)

// backends is every implementation of the port; a new backend adds its row
// and passes the contract before fence may use it.
var backends = []struct {
	name       string
	newStore   func(t *testing.T) journal.Store
	newBackend func(t *testing.T) (journal.Backend, string)
}{
	{"bolt", newBolt, newBoltBackend},
	// The bbolt store with every Update run twice, as an optimistic store
	// retries: proves the suite checks re-runs.
	{"bolt-retrying", func(t *testing.T) journal.Store { return journaltest.RetryingStore(newBolt(t)) }, func(t *testing.T) (journal.Backend, string) {
		b, dir := newBoltBackend(t)
		return journaltest.Retrying(b), dir
	}},
	{"etcd", newEtcd, newEtcdBackend},
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.Stop()
		os.RemoveAll(clusterDir)
	}
	os.Exit(code)
}

func TestContract(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { journaltest.Run(t, b.newStore) })
	}
}

func TestBackendContract(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { journaltest.RunBackend(t, b.newBackend) })
	}
}

// newMetaDir makes <tmp>/.fence, as init does before it creates the
// journal.
func newMetaDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), ".fence")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newBoltBackend(t *testing.T) (journal.Backend, string) {
	return boltstore.Backend{}, newMetaDir(t)
}

// newBolt makes a bbolt journal in <tmp>/.fence, as a tree has it (the
// token ceiling's root copy lands in <tmp>), and checks it at cleanup.
func newBolt(t *testing.T) journal.Store {
	dir := newMetaDir(t)
	if err := boltstore.Create(dir, journaltest.Defaults, journaltest.T0); err != nil {
		t.Fatal(err)
	}
	s, err := boltstore.Backend{}.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	checkAtCleanup(t, s)
	return s
}

func checkAtCleanup(t *testing.T, s journal.Store) {
	t.Cleanup(func() {
		s.View(func(tx journal.Tx) error {
			for _, e := range tx.Check() {
				t.Errorf("consistency check: %v", e)
			}
			return nil
		})
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// One etcd member serves every etcd test of the package, each under a
// prefix of its own.
var (
	clusterOnce sync.Once
	cluster     *etcdtest.Cluster
	clusterDir  string
	clusterErr  error
	prefixes    atomic.Int64
)

func newEtcdBackend(t *testing.T) (journal.Backend, string) {
	clusterOnce.Do(func() {
		clusterDir, clusterErr = os.MkdirTemp("", "fencectl-etcd-")
		if clusterErr == nil {
			cluster, clusterErr = etcdtest.StartIn(clusterDir, 1)
		}
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	b, err := etcdstore.New(journal.Config{Backend: "etcd", Endpoints: cluster.Endpoints(), Prefix: fmt.Sprintf("/test-%d", prefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, newMetaDir(t)
}

// newEtcd makes an etcd journal under a fresh prefix, with the tree's
// .fence (the token ceiling's files) in a temporary directory.
func newEtcd(t *testing.T) journal.Store {
	b, dir := newEtcdBackend(t)
	return createEtcd(t, b, dir)
}

// createEtcd makes a journal with b, .fence being dir, and opens it.
func createEtcd(t *testing.T, b journal.Backend, dir string) journal.Store {
	l, err := b.LockTree(dir, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Create(journaltest.Defaults, uint64(journaltest.T0.UnixMicro()))
	l.Release()
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Open(dir, journal.OpenOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	checkAtCleanup(t, s)
	return s
}
