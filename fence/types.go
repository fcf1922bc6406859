package fence

import (
	"github.com/fencectl/fencectl/fsmirror"
	"github.com/fencectl/fencectl/journal"
)

// The journal's errors a caller of fence tests for, so that it need not
// import journal (imports go one way: cmd → fence → journal). The records
// themselves are package journal/record's, which every layer imports.
type (
	CorruptError = journal.CorruptError
	VersionError = journal.VersionError
	// UnreachableError: a networked store (etcd) did not answer; it
	// matches ErrBusy.
	UnreachableError = journal.UnreachableError
	// MissingDriverError: the tree's journal is in a store this program
	// does not link.
	MissingDriverError = journal.MissingDriverError
	// TLSFileError: a TLS file named for an etcd journal cannot be used;
	// it says whether a variable or the tree's config named it.
	TLSFileError = journal.TLSFileError
)

// ErrBusy means the journal lock was not obtained within the timeout.
var ErrBusy = journal.ErrBusy

// ErrJournalFull means the journal's store refused a write for want of
// space (etcd's quota): nothing was changed.
var ErrJournalFull = journal.ErrFull

// ValidateID checks a task id (or an output name) against the rule
// [A-Za-z0-9][A-Za-z0-9._-]{0,127}; the error names the rule.
func ValidateID(id string) error {
	if err := fsmirror.ValidateID(id); err != nil {
		return invalidf(InputID, RuleFormat, id, "%v", err)
	}
	return nil
}

// ValidateOutputName checks the name of a fenced output (out/<id>/<name>)
// against the same rule as ids.
func ValidateOutputName(name string) error {
	if err := fsmirror.ValidateOutputName(name); err != nil {
		return invalidf(InputOutputName, RuleFormat, name, "%v", err)
	}
	return nil
}
