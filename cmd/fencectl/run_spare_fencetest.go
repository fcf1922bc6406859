//go:build fencetest

package main

import "os"

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
