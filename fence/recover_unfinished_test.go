package fence_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencectl/fencectl/fence"
)

// A recover cut short leaves .fence/recovering and a journal that holds
// only part of the tasks. A tree opened before (a long-lived process: run
// --loop, mcp, serve) must refuse it too, not only Open: an MCP server
// that went on claiming on such a journal was told there was nothing to
// claim while hundreds of tasks waited in available/.
func TestTree_LongLivedRefusesAnUnfinishedRecover(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	add(t, tree, "t2", 0)
	claim(t, tree, "t1", "a") // the handles are open and parked

	mark := filepath.Join(tree.Root(), ".fence", "recovering")
	if err := os.WriteFile(mark, []byte("a recover began\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var unfinished *fence.RecoverUnfinishedError
	if _, err := tree.Claim(bg, fence.ClaimRequest{ID: "t2", Agent: "a"}); !errors.As(err, &unfinished) {
		t.Fatalf("claim with a recover unfinished: %v, want a *RecoverUnfinishedError", err)
	}
	if _, err := tree.Status(bg); !errors.As(err, &unfinished) {
		t.Fatalf("status with a recover unfinished: %v, want a *RecoverUnfinishedError", err)
	}
	if err := os.Remove(mark); err != nil {
		t.Fatal(err)
	}
	claim(t, tree, "t2", "a")
}
