package fence_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// Close while claims are in flight: a group past its lock committed, then
// moved files through descriptors Close had closed, so claims were held
// by tokens nobody got (the undo failed too) and files were left out of
// place (found from outside). Close now waits for the writes in flight
// and refuses later ones: every claim the journal holds is one a caller
// was handed, and the tree and journal agree.
func TestClose_WaitsForWritesInFlight(t *testing.T) {
	for round := range 5 {
		root := filepath.Join(t.TempDir(), "tree")
		if _, err := fence.InitTree(root, testDefaults, fence.Options{}); err != nil {
			t.Fatal(err)
		}
		tree, err := fence.Open(root, fence.Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			add(t, tree, fmt.Sprintf("t%02d", i), 0)
		}
		var (
			wg      sync.WaitGroup
			handed  atomic.Int64
			refused atomic.Int64
			start   = make(chan struct{})
		)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 5 {
					_, err := tree.Claim(bg, fence.ClaimRequest{Agent: fmt.Sprintf("a%d", g)})
					switch {
					case err == nil:
						handed.Add(1)
					case errors.Is(err, fence.ErrTreeClosed):
						refused.Add(1)
					default:
						t.Errorf("round %d: claim: %v", round, err)
					}
				}
			}()
		}
		close(start)
		time.Sleep(time.Duration(round) * time.Millisecond)
		if err := tree.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		again, err := fence.Open(root, fence.Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		st, err := again.Status(bg)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(st.Counts[record.Claimed]); got != handed.Load() {
			t.Fatalf("round %d: %d tasks claimed in the journal, %d claims handed to callers (%d refused as closed)", round, got, handed.Load(), refused.Load())
		}
		checkInvariants(t, again)
		again.Close()
	}
}
