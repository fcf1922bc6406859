package bolt

import "golang.org/x/sys/unix"

// LockFlags returns the open flags of a held lock's descriptor.
func LockFlags(l *Lock) (int, error) { return unix.FcntlInt(l.f.Fd(), unix.F_GETFL, 0) }
