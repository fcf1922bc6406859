package journaltest_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/journaltest"
)

// backends is every implementation of the port; a new backend adds its row
// and passes the contract before fence may use it.
var backends = []struct {
	name     string
	newStore func(t *testing.T) journal.Store
	backend  journal.Backend
	newDir   func(t *testing.T) string // a tree's meta directory, no journal yet
}{
	{"bolt", newBolt, boltstore.Backend{}, newMetaDir},
	// The bbolt store with every Update run twice, as an optimistic store
	// retries: proves the suite checks re-runs.
	{"bolt-retrying", func(t *testing.T) journal.Store { return journaltest.RetryingStore(newBolt(t)) }, journaltest.Retrying(boltstore.Backend{}), newMetaDir},
}

func TestContract(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { journaltest.Run(t, b.newStore) })
	}
}

func TestBackendContract(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { journaltest.RunBackend(t, b.backend, b.newDir) })
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
	return s
}
