package journal

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Raises that race (writers that do not take turns: etcd trees) must never
// leave a ceiling file below the largest value raised: a smaller raise
// renaming its file over a larger one would let a recover after a lost
// journal issue tokens again.
func TestRaiseCeiling_RacingRaisesNeverLower(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, ".fence")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 5; round++ {
		base := uint64(1000 * (round + 1))
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(v uint64) {
				defer wg.Done()
				if err := RaiseCeiling(dir, v); err != nil {
					t.Error(err)
				}
			}(base + uint64(i))
		}
		wg.Wait()
		for _, p := range CeilingPaths(dir) {
			c, err := readCeilingFile(p)
			v, ok := c.value, c.found
			if err != nil || !ok {
				t.Fatalf("round %d: %s: %v (found %v)", round, p, err, ok)
			}
			if want := base + 7; v != want {
				t.Fatalf("round %d: %s holds %d after raises up to %d: a smaller raise overwrote a larger one", round, p, v, want)
			}
		}
	}
}
