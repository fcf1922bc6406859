//go:build !fencetest

package fence

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

// Now is the clock every rule reads. Release builds read the system clock;
// test builds (tag fencetest, hooks_fencetest.go) let tests set it.
// UTC, so that no process spends time loading the local zone to format it.
func Now() time.Time { return time.Now().UTC() }

// crashAt is a named crash point. It does nothing in release builds; test
// builds exit the process there when FENCE_CRASH names it.
func crashAt(point string) {}

// TestHooks reports whether this binary was built with the test hooks.
const TestHooks = false

// renameFault fails chosen renames in test builds (see hooks_fencetest.go);
// nil here, so release builds never ask.
var renameFault func(from fsmirror.Dir, name string) unix.Errno

// noWatch makes the lease keeper's journal watch fail. Never in release
// builds; test builds fail it when FENCE_TEST_NO_WATCH is set, as when the
// user has run out of inotify instances.
func noWatch() bool { return false }
