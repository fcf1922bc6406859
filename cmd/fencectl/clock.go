package main

import (
	"time"

	"github.com/fencectl/fencectl/fence"
)

// testClock is the clock the test build (clock_fencetest.go) sets from the
// environment, so that the scripts move time without sleeping. It is nil in
// release builds: fence then reads the system clock, and so does now.
var testClock func() time.Time // non-nil exactly in the fencetest build

// testBoot is the boot clock the test build sets from the environment (nil:
// the system's); with testClock it makes the lease clock testable.
var testBoot fence.BootClock

// treeNow is the clock of the tree this process opened (see openTree): on
// a bbolt tree the lease clock, which wall-clock jumps do not move, so
// that the time left on a lease is shown as the tree judges it.
var treeNow func() time.Time

// now is the time as the tree sees it, for what the CLI prints and waits
// on (time left on a lease, run's grace period, log --since).
func now() time.Time {
	if treeNow != nil {
		return treeNow()
	}
	if testClock != nil {
		return testClock()
	}
	return time.Now().UTC()
}
