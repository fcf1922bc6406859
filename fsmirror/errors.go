package fsmirror

import (
	"fmt"
	"io/fs"
	"unicode/utf8"
)

// InvalidNameError reports a task id (or another name fsmirror was asked to
// use as a file name) that breaks the naming rule. Why states the rule, so
// the message alone tells the user what to type instead.
type InvalidNameError struct {
	Name string // the name as given, untruncated
	Why  string // which rule it breaks

	what string // what the name is for; "" means "task id"
}

func (e *InvalidNameError) Error() string {
	what := e.what
	if what == "" {
		what = "task id"
	}
	return fmt.Sprintf("invalid %s %s: %s", what, quoteShort(e.Name), e.Why)
}

// quoteShort quotes s with %q, cut to a bounded length so that a huge name
// cannot flood a terminal or a log line.
func quoteShort(s string) string {
	const limit = 64
	if len(s) <= limit {
		return fmt.Sprintf("%q", s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}

// NotRegularError reports an entry that fsmirror refuses to move or open
// because it is not a regular file. Symlinks are refused rather than
// followed so that a task can never point outside the tree; FIFOs and
// devices are refused because opening them can block or have side effects.
type NotRegularError struct {
	Path string
	Kind Kind
}

func (e *NotRegularError) Error() string {
	if e.Kind == Symlink {
		return fmt.Sprintf("%s is a symlink, not a regular file (symlinks are never followed)", e.Path)
	}
	return fmt.Sprintf("%s is a %s, not a regular file", e.Path, e.Kind)
}

// NotDirectoryError reports a path of the tree (a state directory, .fence,
// out/<task>) that exists but is not a real directory. A symlinked state
// directory is refused: following it would let the tree span file systems,
// where renames are no longer atomic.
type NotDirectoryError struct {
	Path string
	Kind Kind
}

func (e *NotDirectoryError) Error() string {
	if e.Kind == Symlink {
		return fmt.Sprintf("%s is a symlink, not a directory (symlinks are never followed)", e.Path)
	}
	return fmt.Sprintf("%s is a %s, not a directory", e.Path, e.Kind)
}

// ExistsError reports that a move found its destination occupied. Moves
// never replace a file: a task in two places is drift for replay to judge,
// not something to overwrite. errors.Is(err, fs.ErrExist) is true.
type ExistsError struct {
	Path string
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("%s already exists", e.Path)
}

// Is makes ExistsError match fs.ErrExist.
func (e *ExistsError) Is(target error) bool { return target == fs.ErrExist }

// TooLargeError reports input to Stage longer than its limit. The partial
// file has been removed.
type TooLargeError struct {
	Limit int64 // bytes
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("input exceeds the limit of %d bytes", e.Limit)
}

// HardLinkedError refuses to adopt a file that has other names: its
// content is shared with a file outside the tree, which could change the
// task under its holder (and a task's writes would change that file). It
// is left where it was; once it has one name it is adopted.
type HardLinkedError struct {
	Name  string
	Links uint64
}

func (e *HardLinkedError) Error() string {
	return fmt.Sprintf("%s has %d hard links: its content is shared with a file outside the tree; left in place, not adopted (move it in with mv, or remove its other names)", quoteShort(e.Name), e.Links)
}

// OtherOwnerError refuses to adopt a file another user owns: whether it
// is still being written cannot be told (a read lease is its owner's to
// take), and its owner could rewrite the task under its holder after.
type OtherOwnerError struct {
	Name  string
	Owner int
}

func (e *OtherOwnerError) Error() string {
	return fmt.Sprintf("%s belongs to another user (uid %d): it may still be written, and that user could change the task under its holder; left in place, not adopted (the tree's user copies it in: cp, then mv into inbox/)", quoteShort(e.Name), e.Owner)
}

// BeingWrittenError refuses to adopt a file that a process has open for
// writing: it may be half written, and what is written later would change
// the task under its holder. It is left where it is and adopted once no
// process has it open for writing.
type BeingWrittenError struct {
	Name string
}

func (e *BeingWrittenError) Error() string {
	return fmt.Sprintf("%s is open for writing by a process (still being written?): left in place, not adopted yet; it is adopted once nothing has it open for writing (write a file elsewhere, then mv it in)", quoteShort(e.Name))
}
