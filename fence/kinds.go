package fence

// NoticeKind says what a Notice reports. The kinds are fencectl's JSON
// vocabulary (the "notice" field of stderr's notice lines), so a value
// never changes once released.
type NoticeKind string

// Notices from a Tree (Options.Notify): something a command did on the way
// or could not do, while the command itself succeeded.
const (
	NoticeAdopted        NoticeKind = "adopted"         // an inbox/ file became an available task
	NoticeInboxRejected  NoticeKind = "inbox_rejected"  // an inbox/ entry that is no valid task file
	NoticeInboxDuplicate NoticeKind = "inbox_duplicate" // an inbox/ file whose id is taken; left there
	NoticeInboxUnmovable NoticeKind = "inbox_unmovable" // an inbox/ file that cannot be moved in
	NoticeSettled        NoticeKind = "settled"         // finished what an interrupted command left undone
	NoticeNotSettled     NoticeKind = "not_settled"     // could not finish it; left for replay
	NoticeNotMoved       NoticeKind = "not_moved"       // a committed move that failed; left for replay
	NoticeNotPublished   NoticeKind = "not_published"   // a staged output that could not be published
	NoticeMissingFile    NoticeKind = "missing_file"    // a task whose file is in no directory
	NoticeSkipped        NoticeKind = "skipped"         // a candidate claim-next passed over
	NoticeQuarantined    NoticeKind = "quarantined"     // an orphan staged file set aside
	NoticeReopened       NoticeKind = "reopened"        // a directory replaced since the tree was opened
	NoticeUpgraded       NoticeKind = "upgraded"        // a commit raised the journal's schema version (older fencectl refuse it now)
	NoticeWarning        NoticeKind = "warning"         // anything else worth a line
)

// Notices from fencectl claim and run, which print them with the same
// shape as the Tree's.
const (
	NoticeReaped      NoticeKind = "reaped"      // an expired lease that this claim reaped
	NoticeKilled      NoticeKind = "killed"      // run killed its command (lease lost or expiring)
	NoticeNoWatch     NoticeKind = "no_watch"    // run cannot watch the task's file
	NoticeContainment NoticeKind = "containment" // run's process containment is partial
)

// FindingKind says what a Finding of replay or recover is. Like NoticeKind
// it is JSON vocabulary (the "kind" field of a finding).
type FindingKind string

// Findings: how the event log, the stored records and the tree disagree.
const (
	FindingLogError       FindingKind = "log_error"       // an event that does not fold (or a state with no directory)
	FindingRecordMismatch FindingKind = "record_mismatch" // a stored task record differs from the log
	FindingRecordMissing  FindingKind = "record_missing"  // the log has a task the records lack
	FindingRecordExtra    FindingKind = "record_extra"    // a record the log never created
	FindingClaimMismatch  FindingKind = "claim_mismatch"  // a stored token record differs from the log
	FindingIndexMismatch  FindingKind = "index_mismatch"  // counts or indexes differ from the records
	FindingBboltCheck     FindingKind = "bbolt_check"     // the store's own consistency check failed
	FindingTokenCounter   FindingKind = "token_counter"   // the token counter is below an issued token
	FindingTokenCeiling   FindingKind = "token_ceiling"   // the ceiling files are missing or low
	FindingMisplaced      FindingKind = "misplaced"       // a task's file is not in its state's directory
	FindingDuplicate      FindingKind = "duplicate"       // a second copy of a task's file
	FindingStaleLink      FindingKind = "stale_link"      // a second name of a task's file (one inode), left by a move by link cut short
	FindingMissingFile    FindingKind = "missing_file"    // a task's file is in no directory
	FindingUnknownFile    FindingKind = "unknown_file"    // a file the journal does not know
	FindingInvalidEntry   FindingKind = "invalid_entry"   // a symlink, directory or bad name in a state directory
	FindingOrphanStaged   FindingKind = "orphan_staged"   // a staged file of a process that died before its commit
)

// Fixable reports whether replay repairs a finding of kind k. The others
// need a person: a damaged log or store (recover rebuilds from the tree),
// or an entry fencectl never follows or deletes.
func (k FindingKind) Fixable() bool {
	switch k {
	case FindingBboltCheck, FindingInvalidEntry, FindingLogError:
		return false
	}
	return true
}
