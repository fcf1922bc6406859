package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deadTie ties token's claim to a process that is gone: a link named
// <token>.gone to an anchor, .anchor-gone, that nobody holds locked.
func deadTie(t *testing.T, metaDir string, token uint64) {
	t.Helper()
	live := filepath.Join(metaDir, liveDirName)
	if err := os.MkdirAll(live, 0o700); err != nil {
		t.Fatal(err)
	}
	anchor := filepath.Join(live, anchorPrefix+"gone")
	if _, err := os.Stat(anchor); err != nil {
		if err := os.WriteFile(anchor, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(anchor, filepath.Join(live, fmt.Sprintf("%d.gone", token))); err != nil {
		t.Fatal(err)
	}
}

// tieLive ties the claim of id to this process through a keeper, and
// returns the suffix of the Tree's anchor.
func tieLive(t *testing.T, tree *Tree, id string, token uint64) (*LeaseKeeper, string) {
	t.Helper()
	k, err := tree.NewKeeper(KeeperConfig{Task: id, Token: token, Agent: "agent-" + id, TTL: time.Minute, Deadline: time.Now().Add(time.Minute), TieToProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	entries, err := os.ReadDir(filepath.Join(tree.metaDir, liveDirName))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if suffix, ok := strings.CutPrefix(e.Name(), anchorPrefix); ok {
			return k, suffix
		}
	}
	t.Fatalf("no anchor in .fence/live: %v", entries)
	return nil, ""
}

// Only a link to the anchor its name says ties a claim. Files a hand, a
// backup restore or another tool left in .fence/live, named like ties,
// reap nobody and are left alone: a stray file for a bare claim's token,
// a stray named for a live run's anchor (once taken for the whole
// anchor's lock), a copy of a live tie (a restore), and a fifo or a
// directory named like an anchor or a tie.
func TestLiveness_StraysTieNothing(t *testing.T) {
	tree, tokens := groupTree(t)
	ctx := context.Background()
	_, suffix := tieLive(t, tree, "a", tokens["a"])
	live := filepath.Join(tree.metaDir, liveDirName)
	strays := map[string]func(string) error{
		fmt.Sprintf("%d.stray", tokens["b"]): func(p string) error { return os.WriteFile(p, nil, 0o600) },
		"1." + suffix:                        func(p string) error { return os.WriteFile(p, nil, 0o600) },
		fmt.Sprintf("0.%s", suffix):          func(p string) error { return os.WriteFile(p, nil, 0o600) },
		fmt.Sprintf("%d.%s", tokens["c"], suffix): func(p string) error {
			return os.WriteFile(p, nil, 0o600) // a copy, not a link
		},
		anchorPrefix + "fifo":               func(p string) error { return syscall.Mkfifo(p, 0o600) },
		fmt.Sprintf("%d.fifo", tokens["c"]): func(p string) error { return os.WriteFile(p, nil, 0o600) },
		anchorPrefix + "dir":                func(p string) error { return os.Mkdir(p, 0o700) },
		fmt.Sprintf("%d.dir", tokens["b"]):  func(p string) error { return os.Mkdir(p, 0o700) },
	}
	// The copy of a's own tie is named for a's token and a's anchor, so
	// it must go where a's link is not: c's token takes it.
	for name, make := range strays {
		if err := make(filepath.Join(live, name)); err != nil {
			t.Fatal(err)
		}
	}
	other, err := Open(tree.Root(), Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Add(ctx, AddRequest{ID: "d"}); err != nil {
		t.Fatal(err)
	}
	dry, err := other.Reap(ctx, true)
	if err != nil || len(dry) != 0 {
		t.Errorf("reap --dry-run with strays beside live holders: %+v, %v; want nothing", dry, err)
	}
	c, err := other.Claim(ctx, ClaimRequest{Agent: "other"})
	if err != nil || c.Task.ID != "d" || len(c.Reaped) != 0 {
		t.Fatalf("claim with strays in .fence/live: %+v, %v; want d, nothing reaped", c, err)
	}
	if _, err := other.Reap(ctx, false); err != nil {
		t.Fatal(err)
	}
	for name := range strays {
		if _, err := os.Lstat(filepath.Join(live, name)); err != nil {
			t.Errorf("stray %s was not left alone: %v", name, err)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := other.Verify(ctx, FencedRequest{ID: id, Token: tokens[id], Agent: "agent-" + id}); err != nil {
			t.Errorf("%s after a claim and a reap beside the strays: %v, want still held", id, err)
		}
	}
}

// A .fence/live that is a symlink is never followed: no scan reads,
// locks or removes what it points at, and a tie is refused (the claim is
// kept, its death left to its TTL) with an error that says what to do.
func TestLiveness_SymlinkedLiveDirIsNotFollowed(t *testing.T) {
	tree, tokens := groupTree(t)
	ctx := context.Background()
	victim := t.TempDir()
	// What a scan would take for a dead holder of a's claim, and files it
	// would tidy.
	if err := os.WriteFile(filepath.Join(victim, anchorPrefix+"foo"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(victim, anchorPrefix+"foo"), filepath.Join(victim, fmt.Sprintf("%d.foo", tokens["a"]))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"1.log", anchorPrefix + "bar", ".tmp-old"} {
		p := filepath.Join(victim, name)
		if err := os.WriteFile(p, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := os.ReadDir(victim)
	live := filepath.Join(tree.metaDir, liveDirName)
	os.RemoveAll(live)
	if err := os.Symlink(victim, live); err != nil {
		t.Fatal(err)
	}
	notDirLive(t, tree, tokens, "d")
	after, _ := os.ReadDir(victim)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("the symlink's target changed:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := tree.Verify(ctx, FencedRequest{ID: "a", Token: tokens["a"], Agent: "agent-a"}); err != nil {
		t.Errorf("a, whose 'tie' was in the symlink's target: %v, want still held", err)
	}
}

// A file or a fifo in place of .fence/live blocks no writer: claims go on
// (deaths are left to the TTL), and a tie is refused saying what to do.
func TestLiveness_LiveNotADirectory(t *testing.T) {
	for name, make := range map[string]func(string) error{
		"file": func(p string) error { return os.WriteFile(p, nil, 0o600) },
		"fifo": func(p string) error { return syscall.Mkfifo(p, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			tree, tokens := groupTree(t)
			if err := make(filepath.Join(tree.metaDir, liveDirName)); err != nil {
				t.Fatal(err)
			}
			notDirLive(t, tree, tokens, "d")
		})
	}
}

// notDirLive checks a tree whose .fence/live is not a directory: a claim
// of the new task id goes through, reaping nothing, and a tie of b's
// claim is refused with a *TieError wrapping a *LiveDirError.
func notDirLive(t *testing.T, tree *Tree, tokens map[string]uint64, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := tree.Add(ctx, AddRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	c, err := tree.Claim(ctx, ClaimRequest{Agent: "other"})
	if err != nil || c.Task.ID != id || len(c.Reaped) != 0 {
		t.Fatalf("claim with .fence/live not a directory: %+v, %v; want %s, nothing reaped", c, err, id)
	}
	if _, err := tree.Reap(ctx, false); err != nil {
		t.Fatalf("reap with .fence/live not a directory: %v", err)
	}
	k, err := tree.NewKeeper(KeeperConfig{Task: "b", Token: tokens["b"], Agent: "agent-b", TTL: time.Minute, Deadline: time.Now().Add(time.Minute), TieToProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	err = k.Start(ctx)
	defer k.Stop()
	var tie *TieError
	var dir *LiveDirError
	if !errors.As(err, &tie) || !errors.As(err, &dir) || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("tie with .fence/live not a directory: %v; want a *TieError wrapping a *LiveDirError that says to remove it", err)
	}
}
