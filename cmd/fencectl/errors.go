package main

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// The one place where errors become what the command line says: the exit
// code, the reason, and a message that names flags and says what to do
// next. The domain's errors carry fields and plain sentences; the words
// of the CLI (flag names, fencectl commands to run) are added here.

// classify maps an error to its exit code, reason and details.
func classify(err error) errorObject {
	obj := errorObject{Code: exitError, Reason: fence.ReasonIOError, Message: err.Error()}
	var (
		stale    *fence.StaleTokenError
		notAv    *fence.NotAvailableError
		noTask   *fence.NoSuchTaskError
		invalid  *fence.InvalidInputError
		usage    *usageError
		corrupt  *fence.CorruptError
		version  *fence.VersionError
		noJrnl   *fence.NoJournalError
		atRisk   *fence.LeaseAtRiskError
		start    *startError
		gone     *outputGoneError
		noReader readerGoneError
		readable *fence.JournalReadableError
		file     *fence.TaskFileError
		batch    *fence.BatchError
		tlsFile  *fence.TLSFileError
		foreign  *fence.ForeignTreeError
		moved    *fence.JournalMovedError
	)
	switch {
	case errors.As(err, &batch):
		obj.Code, obj.Reason = exitNotAvailable, fence.ReasonNotAvailable
		obj.Failed = batchFailures(batch.Failed)
	case errors.As(err, &stale):
		obj.Code, obj.Reason, obj.Task = exitFenced, stale.Reason, stale.Task
		obj.YourToken, obj.State, obj.LostBy = stale.Yours, string(stale.State), stale.LostBy
		obj.Holder, obj.HeldSince = null[string](), null[time.Time]()
		if stale.Holder != "" || !stale.HeldSince.IsZero() {
			obj.Holder, obj.HeldSince = value(stale.Holder), value(stale.HeldSince.UTC())
		}
		if !stale.LostAt.IsZero() {
			at := stale.LostAt.UTC()
			obj.LostAt = &at
		}
	case errors.As(err, &start):
		obj.Code = exitNoCommand
	case errors.As(err, &gone), errors.As(err, &noReader):
		obj.Code = exitBrokenPipe
	case errors.As(err, &atRisk):
		obj.Code, obj.Reason, obj.Task = exitFenced, fence.ReasonLeaseExpired, atRisk.Task
		obj.YourToken = atRisk.Token
	case errors.Is(err, fence.ErrNothingToClaim):
		obj.Code, obj.Reason = exitNotAvailable, fence.ReasonNothingToClaim
	case errors.As(err, &notAv):
		obj.Code, obj.Reason, obj.Task, obj.State = exitNotAvailable, fence.ReasonNotAvailable, notAv.Task, string(notAv.State)
		switch w := notAv.Wait; {
		case notAv.Blocked():
			obj.Reason, obj.WaitsFor = fence.ReasonBlocked, notAv.WaitsFor
			obj.Message += " (`fencectl show " + notAv.Task + "` says where each is; `fencectl set " + notAv.Task + " --after ...` changes them)"
		case w != nil:
			obj.Reason, obj.Attempt = w.Kind.Reason(), w.Attempt
			if !w.Until.IsZero() {
				u := w.Until.UTC()
				obj.NotBefore = &u
			}
			obj.Message += " (claim --wait waits for it; `fencectl list --state waiting` shows what waits)"
		}
	case errors.Is(err, fence.ErrBusy):
		obj.Code, obj.Reason = exitBusy, fence.ReasonBusy
		if _, unreachable := errors.AsType[*fence.UnreachableError](err); !unreachable {
			// Another process holds the tree's lock; an etcd that did not
			// answer says what to do itself (found from outside: this
			// advice, of a lock, followed every etcd timeout).
			obj.Message = err.Error() + " (--timeout / FENCE_TIMEOUT); if that process is stuck, stop it: the last commit is finished by the next writer"
		}
	case errors.As(err, &noTask):
		obj.Code, obj.Reason, obj.Task = exitNoSuchTask, fence.ReasonNoSuchTask, noTask.Task
	case errors.As(err, &invalid):
		obj.Code, obj.Reason, obj.Rule = exitUsage, fence.ReasonInvalidInput, string(invalid.Rule)
		obj.Message = reword(err, invalid, invalidMessage(invalid))
	case errors.As(err, &file):
		obj.Message += taskFileHints[file.Problem]
	case errors.As(err, &readable):
		obj.Code, obj.Reason = exitUsage, fence.ReasonInvalidInput
		obj.Message = err.Error() + "; to bring the tree in line with it run `fencectl replay`"
	case errors.As(err, &usage):
		obj.Code, obj.Reason = exitUsage, fence.ReasonInvalidInput
	case errors.As(err, &tlsFile) && tlsFile.FromInput():
		// A flag or variable named it: bad input, as any malformed FENCE_* is.
		obj.Code, obj.Reason = exitUsage, fence.ReasonInvalidInput
	case errors.As(err, &foreign):
		obj.Reason = fence.ReasonNotOwner
	case errors.As(err, &moved):
		// A recover moved the tree to another journal: no token of this
		// process holds anything there (a run's lease is lost: exit 3).
		obj.Code, obj.Reason = exitFenced, fence.ReasonNotHeld
	case errors.As(err, &version):
		// Not damage: the message names both versions and never advises
		// recover, which would set a healthy journal aside.
		obj.Reason = fence.ReasonJournalVersion
	case errors.As(err, &corrupt):
		obj.Reason = fence.ReasonCorruptJournal
		obj.Message = err.Error() + "; nothing was changed. Next step: `fencectl recover` keeps the damaged file aside (never deleted) and rebuilds the journal from the tree's directories"
	case errors.As(err, &noJrnl):
		obj.Message = reword(err, noJrnl, "no journal at "+noJrnl.Path+noJournalHint)
	case errors.Is(err, fence.ErrNoJournal):
		// Found gone by a tree open since (a daemon's): the same advice.
		obj.Message = err.Error() + noJournalHint
	case errors.Is(err, os.ErrPermission):
		obj.Message = err.Error() + " (check the tree's owner and mode)"
	}
	return obj
}

// noJournalHint follows "no journal at PATH".
const noJournalHint = ": run `fencectl init` to make a task tree there (or pass --dir / FENCE_DIR); if the journal of an existing tree was lost, `fencectl recover` rebuilds it from the directories"

// reword is err's message with inner's sentence (inner is in err's
// chain) replaced by the command line's wording of it.
func reword(err, inner error, text string) string {
	return strings.Replace(err.Error(), inner.Error(), text, 1)
}

// flagOf names the flag that sets each of the domain's inputs.
var flagOf = map[fence.Input]string{
	fence.InputTTL:         "--ttl",
	fence.InputMaxAttempts: "--max-attempts",
	fence.InputWait:        "--wait",
	fence.InputLimit:       "--limit",
	fence.InputState:       "--state",
	fence.InputAfter:       "--after",
	fence.InputRequestID:   "--request-id",
	fence.InputToken:       "--token",
	fence.InputID:          "--id",
	fence.InputRoot:        "--dir",
	fence.InputDeps:        "--after",
	fence.InputLabel:       "--label",
	fence.InputSchedule:    "--not-before/--delay",
	fence.InputBackoff:     "--retry-backoff",
	fence.InputBefore:      "--before",
}

// invalidHints says what to do next after a refusal, by the rule broken.
var invalidHints = map[fence.Rule]string{
	fence.RuleExists:      ": choose another --id, or leave --id out for a fresh one",
	fence.RuleUnknownFile: ": run `fencectl replay` to adopt it, or choose another --id",
	fence.RuleNoTree:      " (`fencectl init` makes a new tree)",
	fence.RuleNotATree:    "; check --dir / FENCE_DIR, or run `fencectl init` to make a new tree there",
	fence.RuleOrphanTasks: " If this tree lost its journal, run `fencectl recover` to rebuild it from the directories",
	fence.RuleInsideTree:  "",
	fence.RuleNetworkFS:   " For a tree that several hosts share, use `--journal etcd://HOST:PORT/PREFIX`; if only this host ever uses the tree, pass --allow-network-fs",
}

// invalidMessage words an invalid input for the command line: the flag
// that set it, and the next step.
func invalidMessage(e *fence.InvalidInputError) string {
	name, ok := flagOf[e.Input]
	if !ok {
		name = strings.ReplaceAll(string(e.Input), "_", " ")
	}
	return e.Describe(name) + invalidHints[e.Rule]
}

// taskFileHints say what to do about a task's file that stopped an action.
var taskFileHints = map[fence.TaskFileProblem]string{
	fence.FileNotRegular: " (fencectl never follows symlinks in the tree: move the entry aside; `fencectl replay --check` lists such entries)",
	fence.FileMissing:    " (run `fencectl replay --check`)",
}

// noticeHints say which command helps with what a notice reports; fence
// says what it found and did, the CLI adds the command.
var noticeHints = map[fence.NoticeKind]string{
	fence.NoticeInboxDuplicate: " (run `fencectl replay`, or rename it)",
	fence.NoticeSkipped:        " (`fencectl replay --check` shows why; `fencectl replay` repairs what it can)",
	fence.NoticeMissingFile:    " (run `fencectl replay --check`)",
	fence.NoticeNotSettled:     " (`fencectl replay --check` shows it; `fencectl replay` repairs it)",
}

// withHint is a notice as the CLI shows it: its detail and the command
// that helps, if any.
func withHint(n fence.Notice) fence.Notice {
	n.Detail += noticeHints[n.Kind]
	return n
}
