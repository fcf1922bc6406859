//go:build fencetest

package main

import (
	"os"
	"strconv"
	"strings"
	"time"
)

func init() { testClock = envClock }

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
