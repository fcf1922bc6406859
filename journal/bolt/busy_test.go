package bolt_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	boltstore "github.com/fencectl/fencectl/journal/bolt"
)

// A busy lock names each holder once, with how many of the locks it holds,
// however many times /proc/locks lists it.
func ExampleBusyError() {
	reader := boltstore.LockHolder{PID: 13168, Comm: "fencectl", Shared: true}
	err := &boltstore.BusyError{
		Lock:    "/srv/tasks/.fence/lock",
		Waited:  10 * time.Second,
		Holders: []boltstore.LockHolder{reader, reader, {PID: 7, Comm: "flock", Shared: true}, reader},
	}
	fmt.Println(err)
	// Output: journal busy: lock /srv/tasks/.fence/lock held by pid 13168 (fencectl, shared) ×3, pid 7 (flock, shared); waited 10s
}

// TestLock_BusyNamesEachHolderOnce: a process holding many shared locks
// (one per reader) is named once in the refusal, as /proc/locks tells it,
// with the count, not once per lock.
func TestLock_BusyNamesEachHolderOnce(t *testing.T) {
	p := lockPath(t)
	for range 5 {
		mustLock(t, p, false, time.Second)
	}
	_, err := boltstore.AcquireLock(p, true, 0)
	var busy *boltstore.BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("exclusive lock while five shared ones are held: err = %v, want a *BusyError", err)
	}
	if len(busy.Holders) == 0 {
		t.Skip("/proc/locks did not name the holders")
	}
	me := fmt.Sprintf("pid %d (", os.Getpid())
	if n := strings.Count(err.Error(), me); n != 1 {
		t.Errorf("this process is named %d times, want once:\n%v", n, err)
	}
	if len(busy.Holders) > 1 && !strings.Contains(err.Error(), fmt.Sprintf(", shared) ×%d", len(busy.Holders))) {
		t.Errorf("%d shared locks of this process, but the message does not count them:\n%v", len(busy.Holders), err)
	}
}
