package fence_test

import (
	"testing"

	"github.com/fencectl/fencectl/fence"
)

// Replay repairs every kind of finding except a damaged log or store and
// the entries fencectl never follows or deletes.
func TestFindingKind_Fixable(t *testing.T) {
	for k, want := range map[fence.FindingKind]bool{
		fence.FindingLogError: false, fence.FindingBboltCheck: false, fence.FindingInvalidEntry: false,
		fence.FindingRecordMismatch: true, fence.FindingRecordMissing: true, fence.FindingRecordExtra: true,
		fence.FindingClaimMismatch: true, fence.FindingIndexMismatch: true, fence.FindingTokenCounter: true,
		fence.FindingTokenCeiling: true, fence.FindingMisplaced: true, fence.FindingDuplicate: true,
		fence.FindingMissingFile: true, fence.FindingUnknownFile: true, fence.FindingOrphanStaged: true,
		fence.FindingStaleLink: true,
	} {
		if got := k.Fixable(); got != want {
			t.Errorf("%s.Fixable() = %v, want %v", k, got, want)
		}
	}
}
