//go:build fencetest

package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"time"
)

func init() { testClock, testBoot = jumpedClock, envBoot }

// The lease clock in tests. envClock is the true time, the one a boot
// clock measures; FENCE_TEST_WALL_JUMP (a duration, e.g. 1h or -1h) sets
// the wall clock that far off it, as a person or NTP setting the clock
// would; FENCE_TEST_BOOT_ID names the boot (default "test-boot"): change
// it to simulate a reboot. FENCE_TEST_NO_BOOT=1 takes the boot clock away
// (the wall clock alone judges leases).

// testBootBase is when the test boot began, in true time, unless
// FENCE_TEST_BOOT_AT says.
var testBootBase = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func jumpedClock() time.Time {
	d, _ := time.ParseDuration(os.Getenv("FENCE_TEST_WALL_JUMP"))
	return envClock().Add(d)
}

func envBoot() (string, time.Duration, error) {
	if os.Getenv("FENCE_TEST_NO_BOOT") == "1" {
		return "", 0, errors.New("no boot clock (FENCE_TEST_NO_BOOT)")
	}
	id := os.Getenv("FENCE_TEST_BOOT_ID")
	if id == "" {
		id = "test-boot"
	}
	base := testBootBase
	if at, ok := parseTestTime(os.Getenv("FENCE_TEST_BOOT_AT")); ok {
		base = at
	}
	return id, envClock().Sub(base), nil
}

// envClock reads the test clock: the time in the file named by
// FENCE_TEST_CLOCK (re-read at every call, so a long-running process sees
// it move), else FENCE_TEST_NOW, else the system clock. Values are RFC 3339
// times or Unix seconds.
func envClock() time.Time {
	if p := os.Getenv("FENCE_TEST_CLOCK"); p != "" {
		if b, err := os.ReadFile(p); err == nil {
			if t, ok := parseTestTime(strings.TrimSpace(string(b))); ok {
				return t
			}
		}
	}
	if t, ok := parseTestTime(os.Getenv("FENCE_TEST_NOW")); ok {
		return t
	}
	return time.Now().UTC()
}

func parseTestTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(secs, 0), true
	}
	return time.Time{}, false
}
