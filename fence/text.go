package fence

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Texts the journal keeps: agent names (written into every event of
// their claims, echoed in refusals) and reasons. They are shown to
// operators and printed as JSON, so no control characters and only
// UTF-8 (a name with other bytes came back from `log --json` as another
// name, U+FFFD for each, which a script comparing holders never matched),
// and they are bounded. The rule is the library's, so that every way in
// (the CLI, MCP, the Go API) keeps the same journal; the library took any
// bytes at all (found from outside).

// MaxAgentLen and MaxReasonLen bound an agent name and a reason, in bytes.
const (
	MaxAgentLen  = 256
	MaxReasonLen = 4096
)

// Inputs of the text rule.
const (
	InputAgent  Input = "agent"  // who acts (recorded, never compared)
	InputReason Input = "reason" // why (recorded in the event)
)

// TextProblem says what is wrong with s as a text of at most max bytes
// the journal keeps, or "".
func TextProblem(s string, max int) string {
	if len(s) > max {
		return fmt.Sprintf("%d bytes long, at most %d allowed (it is recorded in every event it names)", len(s), max)
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return "control characters are not allowed"
	}
	if !utf8.ValidString(s) {
		return "not valid UTF-8 (it must be text: it is printed in --json output)"
	}
	return ""
}

// checkTexts refuses an agent name or a reason that breaks TextProblem.
func checkTexts(agent, reason string) error {
	if why := TextProblem(agent, MaxAgentLen); why != "" {
		return invalidf(InputAgent, RuleFormat, agent, "%s", why)
	}
	if why := TextProblem(reason, MaxReasonLen); why != "" {
		return invalidf(InputReason, RuleFormat, reason, "%s", why)
	}
	return nil
}
