package fence_test

import (
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
)

// replay --check reports the marks that keep tokens from going back when
// they are behind, and replay restores them: the ceiling's files deleted
// by hand, and a token counter below a token the log issued.
func TestTree_ReplayRestoresTokenMarks(t *testing.T) {
	tree, _ := newTreeWith(t, testDefaults, fence.Options{})
	add(t, tree, "t1", 0)
	c := claim(t, tree, "t1", "a")
	meta := filepath.Join(tree.Root(), ".fence")
	for _, p := range journal.CeilingPaths(meta) {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	// The counter, by hand, below the token just issued.
	b, err := bolt.Open(boltstore.Path(meta), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("token"), make([]byte, 8))
	})
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	rep, err := tree.Replay(bg, true)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[fence.FindingKind]bool{}
	for _, f := range rep.Findings {
		kinds[f.Kind] = true
	}
	if !kinds[fence.FindingTokenCounter] || !kinds[fence.FindingTokenCeiling] || len(rep.Findings) != 2 {
		t.Fatalf("replay --check: %+v, want token_counter and token_ceiling", rep.Findings)
	}
	if rep, err = tree.Replay(bg, false); err != nil || rep.Unfixed() != 0 {
		t.Fatalf("replay: %+v, %v", rep.Findings, err)
	}
	if ceiling, ok, err := journal.ReadCeiling(meta); err != nil || !ok || ceiling <= c.Token {
		t.Fatalf("ceiling after replay: %d, %v, %v; want above %d", ceiling, ok, err, c.Token)
	}
	if _, err := tree.Release(bg, fence.FencedRequest{ID: "t1", Token: c.Token}); err != nil {
		t.Fatal(err)
	}
	if again := claim(t, tree, "t1", "b"); again.Token <= c.Token {
		t.Fatalf("token %d after the repair, want above %d", again.Token, c.Token)
	}
}
