//go:build fencetest

package main

import (
	"os"
	"time"
)

// FENCE_TEST_SPARE_CPU=yes (or no) forces run --loop's answer to "is a
// core spare?", so that tests can drive pipelining either way whatever
// the machine's load.
func init() {
	testSpareCPU = func() (bool, bool) {
		switch os.Getenv("FENCE_TEST_SPARE_CPU") {
		case "yes":
			return true, true
		case "no":
			return false, true
		}
		return false, false
	}
}

// FENCE_TEST_HAND_BACK_AFTER sets how long a command runs before run
// --loop hands back the tasks it holds for the next ones, and
// FENCE_TEST_SHORT_BELOW how short a command must be for run --loop to
// claim ahead, so that tests whose commands take their time (they start
// processes) drive both whatever the machine's load.
func init() {
	if d, err := time.ParseDuration(os.Getenv("FENCE_TEST_HAND_BACK_AFTER")); err == nil && d > 0 {
		testHandBackAfter = d
	}
	if d, err := time.ParseDuration(os.Getenv("FENCE_TEST_SHORT_BELOW")); err == nil && d > 0 {
		testShortBelow = d
	}
}
