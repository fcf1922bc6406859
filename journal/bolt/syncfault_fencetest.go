//go:build fencetest

package bolt

import (
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// commitSyncFault answers EIO for the Nth commit of this process when
// FENCE_TEST_JOURNAL_SYNC_FAULT=N, after bbolt has made it: what bbolt
// returns when the fdatasync after its meta page fails (the page is
// written, every reader sees the commit). strace can do the same from
// outside (-e inject=fdatasync:error=EIO:when=2 on a claim).
func commitSyncFault() error {
	n, err := strconv.ParseInt(os.Getenv("FENCE_TEST_JOURNAL_SYNC_FAULT"), 10, 64)
	if err != nil || commits.Add(1) != n {
		return nil
	}
	return unix.EIO
}

// commits counts this process's commits.
var commits atomic.Int64
