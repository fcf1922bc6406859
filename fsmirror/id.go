package fsmirror

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// idRule is the task id rule, quoted in every InvalidNameError.
const idRule = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}"

// maxIDLen is the longest id the rule allows, in bytes.
const maxIDLen = 128

// ValidateID checks that id is a task id: it matches
// [A-Za-z0-9][A-Za-z0-9._-]{0,127}. The rule makes an id a plain file name
// (never ".", "..", empty or a path), ASCII only so that look-alike letters
// cannot make two tasks that print the same, and never starting with '.'
// (hidden, and the inbox convention for writes in progress) or '-' (read as
// a flag by shell tools). It returns an *InvalidNameError.
func ValidateID(id string) error {
	return validateName(id, "")
}

// validateName is ValidateID for other names that follow the id rule, such
// as output names; what names the thing in the error message.
func validateName(name, what string) error {
	if why := idProblem(name); why != "" {
		return &InvalidNameError{Name: name, Why: why, what: what}
	}
	return nil
}

// idProblem says why id breaks the rule, or returns "".
func idProblem(id string) string {
	const notPath = "must match " + idRule + " (a file name, not a path)"
	switch {
	case id == "":
		return "must not be empty; must match " + idRule
	case id == "." || id == ".." || strings.ContainsRune(id, '/'):
		return notPath
	case len(id) > maxIDLen:
		return fmt.Sprintf("is %d bytes long, at most %d allowed; must match %s", len(id), maxIDLen, idRule)
	}
	for i := 0; i < len(id); {
		r, size := utf8.DecodeRuneInString(id[i:])
		if !idChar(r, i == 0) {
			where := fmt.Sprintf("contains %s at byte %d", describeRune(r, size, id[i]), i)
			if i == 0 {
				where = "starts with " + describeRune(r, size, id[i])
			}
			return where + "; must match " + idRule
		}
		i += size
	}
	return ""
}

// idChar reports whether r may appear in an id, first or later.
func idChar(r rune, first bool) bool {
	switch {
	case 'A' <= r && r <= 'Z', 'a' <= r && r <= 'z', '0' <= r && r <= '9':
		return true
	case r == '.' || r == '_' || r == '-':
		return !first
	}
	return false
}

// describeRune names a refused character so that invisible and look-alike
// characters are visible in the message.
func describeRune(r rune, size int, b byte) string {
	switch {
	case r == utf8.RuneError && size == 1:
		return fmt.Sprintf("invalid UTF-8 byte %#02x", b)
	case r >= utf8.RuneSelf:
		return fmt.Sprintf("%q (U+%04X, not ASCII)", r, r)
	}
	return fmt.Sprintf("%q", r)
}

// validComponent checks that name is a single path component: not empty,
// not "." or "..", no '/' and no NUL. It is the rule for names that are not
// task ids, such as staging file names.
func validComponent(name, what string) error {
	if name == "" || name == "." || name == ".." || len(name) > 255 ||
		strings.ContainsAny(name, "/\x00") {
		return &InvalidNameError{
			Name: name,
			Why:  `must be a single file name (not empty, no '/' or NUL, not "." or "..", at most 255 bytes)`,
			what: what,
		}
	}
	return nil
}

// ValidateLabel checks that label follows the task id rule (a label names
// a class of tasks, and is printed and passed on command lines as ids
// are). It returns an *InvalidNameError.
func ValidateLabel(label string) error {
	return validateName(label, "label")
}
