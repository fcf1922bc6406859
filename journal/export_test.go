package journal

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
