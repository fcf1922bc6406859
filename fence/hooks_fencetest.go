//go:build fencetest

package fence

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// TestHooks reports whether this binary was built with the test hooks.
const TestHooks = true

// Now reads the test clock: the time in the file named by FENCE_TEST_CLOCK
// (re-read at every call, so a long-running process sees it move), else
// FENCE_TEST_NOW, else the system clock. Values are RFC 3339 times or Unix
// seconds.
func Now() time.Time {
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
	return time.Now()
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

// crashAt exits the process at a named point when FENCE_CRASH lists it.
// Points look like "claim:after-commit"; a listed name matches the whole
// point or the part after the colon ("after-commit" matches every op).
func crashAt(point string) {
	list := os.Getenv("FENCE_CRASH")
	if list == "" {
		return
	}
	_, step, _ := strings.Cut(point, ":")
	for _, want := range strings.Split(list, ",") {
		if want == point || (step != "" && want == step) {
			fmt.Fprintf(os.Stderr, "fencectl: test crash at %s\n", point)
			os.Exit(99)
		}
	}
}
