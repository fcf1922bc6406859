package fence_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fence"
)

// Open puts a readable journal back to 0600. The tree's owner swaps the
// journal with a symlink to a file of its choice as fast as it can while
// another process (root's, in the attack found from outside) opens the
// tree: a check of the path then a chmod of the path changed the file the
// symlink named. The chmod must reach only the file it checked.
func TestOpen_KeepPrivateFollowsNoSwappedSymlink(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	if _, err := fence.InitTree(root, testDefaults, fence.Options{}); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(root, ".fence")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("not the tree's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(meta, "swap")); err != nil {
		t.Fatal(err)
	}
	journalFD, err := unix.Open(filepath.Join(meta, "journal.db"), unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(journalFD)
	dirFD, err := unix.Open(meta, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirFD)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	swaps := 0
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				if swaps%2 == 1 { // put the journal back
					_ = unix.Renameat2(dirFD, "journal.db", dirFD, "swap", unix.RENAME_EXCHANGE)
				}
				return
			default:
			}
			_ = unix.Fchmod(journalFD, 0o644)
			if unix.Renameat2(dirFD, "journal.db", dirFD, "swap", unix.RENAME_EXCHANGE) == nil {
				swaps++
			}
		}
	}()
	for range 400 {
		if tree, err := fence.Open(root, fence.Options{}); err == nil {
			tree.Close()
		}
		if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
			close(stop)
			wg.Wait()
			t.Fatalf("a file the journal's name was swapped for had its mode changed: %v %v", fi.Mode(), err)
		}
	}
	close(stop)
	wg.Wait()
	if swaps == 0 {
		t.Fatal("the journal was never swapped: the test tried nothing")
	}
}
