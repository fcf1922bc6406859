//go:build !fencetest

package bolt

// commitSyncFault fails a commit after bbolt made it, as a failed sync
// of its meta page does, in test builds (see syncfault_fencetest.go);
// never here.
func commitSyncFault() error { return nil }
