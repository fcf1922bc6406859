package fence_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// A keeper used out of order says so at once: Watch of a keeper never
// started waited for a loop that did not exist, for good, and a Start
// after Stop answered nil and kept nothing (found from outside).
func TestKeeper_OutOfOrderSaysSo(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	c := claim(t, tree, "t1", "a")
	newKeeper := func() *fence.LeaseKeeper {
		k, err := tree.NewKeeper(fence.KeeperConfig{Task: "t1", Token: c.Token, Deadline: c.Deadline, WatchLater: true})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	within := func(name string, f func() error) error {
		t.Helper()
		ch := make(chan error, 1)
		go func() { ch <- f() }()
		select {
		case err := <-ch:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s has not returned after 10s", name)
			return nil
		}
	}
	k := newKeeper()
	if err := within("Watch before Start", k.Watch); !errors.Is(err, fence.ErrKeeperNotStarted) {
		t.Fatalf("Watch before Start: %v, want ErrKeeperNotStarted", err)
	}
	k.Stop()
	if err := within("Watch after an early Stop", k.Watch); err != nil {
		t.Fatalf("Watch of a keeper stopped before it started: %v, want nil (nothing to watch)", err)
	}
	if err := k.Start(bg); !errors.Is(err, fence.ErrKeeperStopped) {
		t.Fatalf("Start after Stop: %v, want ErrKeeperStopped", err)
	}
}
