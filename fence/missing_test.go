package fence_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// Files removed by hand cost claim-next once, not on every claim: the
// first claim that meets them fails them (reason "task file missing") and
// claims the next task; the next claim looks at none of them. The work is
// counted by the notices each claim gives for a task without a file (one
// per task examined), not timed.
func TestTree_ClaimSettlesMissingFilesOnce(t *testing.T) {
	const gone = 2000
	tree, n := newTreeWith(t, testDefaults, fence.Options{})
	for i := 0; i < gone; i++ {
		if err := os.WriteFile(filepath.Join(tree.Root(), "inbox", fmt.Sprintf("g%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for inbox := gone; inbox > 0; { // any writer adopts the inbox, 256 files a turn
		if _, err := tree.Reap(bg, false); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(filepath.Join(tree.Root(), "inbox"))
		if err != nil || len(entries) >= inbox {
			t.Fatalf("a writer adopted nothing of the %d files left in inbox/ (%v)", inbox, err)
		}
		inbox = len(entries)
	}
	for i := 0; i < gone; i++ {
		if err := os.Remove(filepath.Join(tree.Root(), "available", fmt.Sprintf("g%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	add(t, tree, "ok1", 0)
	add(t, tree, "ok2", 0)

	n.reset()
	if c := claim(t, tree, "", "a"); c.Task.ID != "ok1" {
		t.Fatalf("first claim got %s, want ok1", c.Task.ID)
	}
	if got := len(n.of(fence.NoticeMissingFile)); got != gone {
		t.Fatalf("first claim settled %d tasks without a file, want %d", got, gone)
	}
	n.reset()
	if c := claim(t, tree, "", "a"); c.Task.ID != "ok2" {
		t.Fatalf("second claim got %s, want ok2", c.Task.ID)
	}
	if got := len(n.of(fence.NoticeMissingFile)) + len(n.of(fence.NoticeSkipped)); got != 0 {
		t.Fatalf("second claim looked at %d tasks without a file again, want 0", got)
	}
	for _, id := range []string{"g00000", fmt.Sprintf("g%05d", gone-1)} {
		v, err := tree.Show(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		if v.Task.State != record.Failed || v.Task.Last == nil || v.Task.Last.Reason != fence.ReasonFileMissing || v.Task.Attempts != 0 {
			t.Fatalf("%s after the claim: %+v (last %+v), want failed, reason %q, no attempt", id, v.Task, v.Task.Last, fence.ReasonFileMissing)
		}
	}
	// Nothing left to claim: the missing ones are not looked at either.
	n.reset()
	if _, err := tree.Claim(bg, fence.ClaimRequest{Agent: "a"}); err != fence.ErrNothingToClaim {
		t.Fatalf("third claim: %v, want ErrNothingToClaim", err)
	}
	if got := len(n.of(fence.NoticeMissingFile)) + len(n.of(fence.NoticeSkipped)); got != 0 {
		t.Fatalf("an empty claim looked at %d tasks without a file, want 0", got)
	}
}

// A file moved by hand to another state directory is not missing: claim
// skips it (replay moves it back) and never fails it.
func TestTree_ClaimSkipsHandMovedFile(t *testing.T) {
	tree, n := newTreeWith(t, testDefaults, fence.Options{})
	add(t, tree, "moved", 0)
	add(t, tree, "ok", 0)
	if err := os.Rename(tree.Path("moved", record.Available), tree.Path("moved", record.Done)); err != nil {
		t.Fatal(err)
	}
	if c := claim(t, tree, "", "a"); c.Task.ID != "ok" {
		t.Fatalf("claim got %s, want ok", c.Task.ID)
	}
	if !n.has(fence.NoticeSkipped, "moved") || n.has(fence.NoticeMissingFile, "moved") {
		t.Fatalf("notices %+v: want moved skipped, not settled", n.list)
	}
	if v, _ := tree.Show(bg, "moved"); v.Task.State != record.Available {
		t.Fatalf("moved is %s, want still available", v.Task.State)
	}
	if _, err := tree.Replay(bg, false); err != nil {
		t.Fatal(err)
	}
}

// Replay settles a task without a file in every state, so tree and
// journal agree: available and claimed ones fail (a lease ends, its token
// is refused), failed ones stay failed, done ones stay done. A second
// replay finds nothing.
func TestTree_ReplaySettlesMissingFiles(t *testing.T) {
	tree, _ := newTreeWith(t, record.Defaults{TTL: testDefaults.TTL, MaxAttempts: 1}, fence.Options{})
	for _, id := range []string{"a", "c", "d", "f"} {
		add(t, tree, id, 0)
	}
	held := claim(t, tree, "c", "x")
	done := claim(t, tree, "d", "x")
	if _, err := tree.Complete(bg, fence.FencedRequest{ID: "d", Token: done.Token}); err != nil {
		t.Fatal(err)
	}
	failed := claim(t, tree, "f", "x")
	if _, err := tree.Fail(bg, fence.FencedRequest{ID: "f", Token: failed.Token}); err != nil {
		t.Fatal(err)
	}
	want := map[string]record.State{"a": record.Failed, "c": record.Failed, "d": record.Done, "f": record.Failed}
	for id := range want {
		v, _ := tree.Show(bg, id)
		if err := os.Remove(tree.Path(id, v.Task.State)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := tree.Replay(bg, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unfixed() != 0 || len(rep.Findings) != len(want) {
		t.Fatalf("replay: %+v", rep.Findings)
	}
	for id, s := range want {
		v, _ := tree.Show(bg, id)
		if v.Task.State != s || v.Task.Last == nil || v.Task.Last.By != record.EvMissing {
			t.Errorf("%s: %s (last %+v), want %s settled as missing", id, v.Task.State, v.Task.Last, s)
		}
	}
	if _, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "c", Token: held.Token}); err == nil {
		t.Fatal("the token of a task settled as missing still authorises")
	}
	if rep, err := tree.Replay(bg, false); err != nil || len(rep.Findings) != 0 {
		t.Fatalf("second replay: %+v, %v", rep.Findings, err)
	}
}
