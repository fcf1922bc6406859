package fence_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencectl/fencectl/fence"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/journaltest"
	"github.com/fencectl/fencectl/journal/record"
)

// An optimistic store (etcd) runs a write transaction's function again
// when its compare fails at commit. On the bbolt store with every Update
// run twice (the first run rolled back), every kind of write must still
// commit once: the same events, the same files, the invariants kept.
func TestTree_RetriedTransactionsCommitOnce(t *testing.T) {
	tree, _ := newTreeWith(t, testDefaults, fence.Options{Backend: journaltest.Retrying(boltstore.Backend{})})
	for i := range 6 {
		add(t, tree, fmt.Sprintf("t%d", i), int64(i%2))
	}
	// Adoption from inbox/ stages the file inside the transaction.
	inbox := filepath.Join(tree.Root(), "inbox")
	if err := os.WriteFile(filepath.Join(inbox, "dropped"), []byte("content of dropped"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := claim(t, tree, "t0", "a")
	fileAt(t, tree, "dropped", record.Available)
	if _, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "t0", Token: c.Token, Agent: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "t0", Token: c.Token, Agent: "a", Result: strings.NewReader("ok")}); err != nil {
		t.Fatal(err)
	}
	c = claim(t, tree, "", "b")
	if _, err := tree.Fail(bg, fence.FencedRequest{ID: c.Task.ID, Token: c.Token, Agent: "b"}); err != nil {
		t.Fatal(err)
	}
	// A group commit: concurrent claims, some refused (t0 is done).
	var wg sync.WaitGroup
	tokens := make(chan uint64, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ""
			if i%3 == 0 {
				id = "t0"
			}
			if r, err := tree.Claim(bg, fence.ClaimRequest{ID: id, Agent: fmt.Sprint("g", i)}); err == nil {
				tokens <- r.Token
			}
		}()
	}
	wg.Wait()
	close(tokens)
	seen := map[uint64]bool{}
	for tok := range tokens {
		if seen[tok] {
			t.Errorf("token %d issued twice", tok)
		}
		seen[tok] = true
	}
	if len(seen) != 5 {
		t.Errorf("%d concurrent claims succeeded; want 5 (the 5 available tasks; t0 is done)", len(seen))
	}
	// Replay adopts a file the journal does not know.
	if err := os.WriteFile(filepath.Join(tree.Root(), "available", "stray"), []byte("content of stray"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Replay(bg, false); err != nil {
		t.Fatal(err)
	}
	fileAt(t, tree, "stray", record.Available)

	evs, err := tree.Log(bg, fence.LogFilter{Heartbeats: true})
	if err != nil {
		t.Fatal(err)
	}
	// 6 adds, 1 adoption, claim, heartbeat, complete, claim, fail, 5
	// claims, 1 adoption by replay: one event each, none twice.
	if len(evs) != 18 {
		var types []string
		for _, ev := range evs {
			types = append(types, string(ev.Type)+" "+ev.Task)
		}
		t.Errorf("%d events; want 18:\n%s", len(evs), strings.Join(types, "\n"))
	}
}
