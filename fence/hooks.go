//go:build !fencetest

package fence

import (
	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

// crashAt is a named crash point. It does nothing in release builds; test
// builds exit the process there when FENCE_CRASH names it.
func crashAt(point string) {}

// renameFault fails chosen renames in test builds (see hooks_fencetest.go);
// nil here, so release builds never ask.
var renameFault func(from fsmirror.Dir, name string) unix.Errno

// renameTrace is told of every rename and directory fsync in test builds
// that log them for the power-loss test (see hooks_fencetest.go); nil
// here.
var renameTrace func(op, a, b string)

// noWatch makes the lease keeper's journal watch fail. Never in release
// builds; test builds fail it when FENCE_TEST_NO_WATCH is set, as when the
// user has run out of inotify instances.
func noWatch() bool { return false }

// testFSType is the file system type a test build pretends the tree is on
// (FENCE_TEST_FSTYPE); "" here: release builds ask statfs.
func testFSType() string { return "" }
