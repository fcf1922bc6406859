package main

import "time"

// testClock is the clock the test build (clock_fencetest.go) sets from the
// environment, so that the scripts move time without sleeping. It is nil in
// release builds: fence then reads the system clock, and so does now.
var testClock func() time.Time // non-nil exactly in the fencetest build

// now is the time as the tree sees it, for what the CLI prints and waits
// on (time left on a lease, run's grace period, log --since).
func now() time.Time {
	if testClock != nil {
		return testClock()
	}
	return time.Now().UTC()
}
