package daemonlink

import "syscall"

// MinDaemonFiles is the least open-file limit a daemon is started with.
// A daemon inherits the limits of the step that starts it, and serves
// every agent's steps after: started by an agent under `ulimit -n 30`,
// it failed every agent's steps with "too many open files" for as long
// as steps kept it alive (found from outside). A process whose hard
// limit is lower runs its step itself and starts no daemon (the Go
// runtime raises the soft limit to the hard one at start).
const MinDaemonFiles = 1024

// CanStartDaemon reports whether this process's limits are fit for the
// daemon it would start.
func CanStartDaemon() bool {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return false
	}
	return lim.Max >= MinDaemonFiles
}
