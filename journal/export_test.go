package journal

import "golang.org/x/sys/unix"

// The record codec, for the tests of package journal_test.
var (
	EncodeTask  = encodeTask
	DecodeTask  = decodeTask
	EncodeClaim = encodeClaim
	DecodeClaim = decodeClaim
	EncodeEvent = encodeEvent
	DecodeEvent = decodeEventRecord

	EncodeDefaults = encodeDefaults
	DecodeDefaults = decodeDefaults
)

// LockFlags returns the open flags of a held lock's descriptor.
func LockFlags(l *Lock) (int, error) { return unix.FcntlInt(l.f.Fd(), unix.F_GETFL, 0) }
