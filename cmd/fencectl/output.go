package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unicode"
	"unicode/utf8"

	"github.com/fencectl/fencectl/cmd/internal/daemonlink"
	"github.com/fencectl/fencectl/fence"
)

// Exit codes: stable, scripts depend on them (README, DESIGN.md).
const (
	exitOK           = 0
	exitError        = 1
	exitUsage        = 2
	exitFenced       = 3
	exitNotAvailable = 4
	exitBusy         = 5
	exitNoSuchTask   = 6
	exitDrift        = 7
)

// output carries the streams and the --json choice, and collects notices.
// With --json, stdout carries results and stderr exactly one JSON object
// per error, nothing else: notices travel inside the result (or the error)
// as "notices", never as lines of their own on stderr.
type output struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	json           bool
	notFound       string
	notices        []fence.Notice
	reported       error // already printed as an error object (run's summary)
	stdoutIsCMDs   bool  // run: stdout belongs to CMD, so notices go to stderr
	// args is the command line run was given, for a daemon to run again.
	args []string
	// served is set when a daemon runs this command for a client
	// (daemon.go): the client's variables and tree, and the daemon's open
	// trees. nil in a command's own process.
	served *served
	// parsed ends this command's turn to parse its command line, in a
	// daemon (parseAlone); nil elsewhere.
	parsed func()
	// noticeMu guards notices where another goroutine may add to them (a
	// daemon's trees tell every command in flight); nil where none can.
	noticeMu *sync.Mutex
}

// answerWriter is a command's stdout in its own process: it keeps the
// first error of its writes and what that write carried, so that a step
// whose answer could not be written says so and exits 1 (see
// daemonlink.AnswerLostError) instead of exit 0 with the answer lost.
type answerWriter struct {
	w    io.Writer
	err  error
	lost []byte
}

func (a *answerWriter) Write(p []byte) (int, error) {
	n, err := a.w.Write(p)
	if err != nil && a.err == nil {
		a.err, a.lost = err, append([]byte(nil), p[:min(len(p), 256)]...) // the message shows 200
	}
	return n, err
}

// stdoutFile is the file stdout writes to, if it is one: the checks for
// a reader (claim_reader.go) look at it.
func (o *output) stdoutFile() (*os.File, bool) { return fileOf(o.stdout) }

// rawStdout is stdout without the answerWriter: what a child process is
// given (exec.Cmd copies through a pipe, and waits for every holder of
// it, for any writer that is not a file) and what a long session (mcp)
// writes to.
func (o *output) rawStdout() io.Writer {
	if a, ok := o.stdout.(*answerWriter); ok {
		return a.w
	}
	return o.stdout
}

// fileOf is the file w writes to, if it is one (through an answerWriter).
func fileOf(w any) (*os.File, bool) {
	if a, ok := w.(*answerWriter); ok {
		w = a.w
	}
	f, ok := w.(*os.File)
	return f, ok
}

// answerLost is the error of a command that succeeded but could not
// write its answer, nil if it could.
func (o *output) answerLost(command string) error {
	a, ok := o.stdout.(*answerWriter)
	if !ok || a.err == nil || errors.Is(a.err, syscall.EPIPE) {
		return nil // EPIPE: the reader left by choice (`| head`), as before
	}
	return errors.New(daemonlink.AnswerLostError(command, a.err, a.lost))
}

func (o *output) notice(n fence.Notice) {
	if o.noticeMu != nil {
		o.noticeMu.Lock()
		defer o.noticeMu.Unlock()
	}
	o.notices = append(o.notices, withHint(n))
}

// pendingNotices takes the notices collected so far.
func (o *output) pendingNotices() []fence.Notice {
	if o.noticeMu != nil {
		o.noticeMu.Lock()
		defer o.noticeMu.Unlock()
	}
	n := o.notices
	o.notices = nil
	return n
}

// flushNotices prints what the command noticed on the way: as text on
// stderr, or with --json as {"notice",…} objects on stdout after the
// results, for the commands whose result is a stream (log) rather than
// one object that could carry them (run: on stderr, with its summaries).
func (o *output) flushNotices() {
	w := o.stdout
	if o.stdoutIsCMDs {
		w = o.stderr
	}
	shown := map[fence.NoticeKind]int{}
	var kinds []fence.NoticeKind // in order of first appearance
	for _, n := range o.pendingNotices() {
		if o.json {
			o.writeJSON(w, newNotice(n))
			continue
		}
		if shown[n.Kind] == 0 {
			kinds = append(kinds, n.Kind)
		}
		if shown[n.Kind]++; shown[n.Kind] <= noticeLines {
			fmt.Fprintf(o.stderr, "fencectl: %s %s: %s\n", strings.ReplaceAll(string(n.Kind), "_", " "), printable(n.Name), printable(n.Detail))
		}
	}
	for _, k := range kinds {
		if more := shown[k] - noticeLines; more > 0 {
			fmt.Fprintf(o.stderr, "fencectl: %s: %d more like these (--json lists every one; `fencectl log` shows them)\n", strings.ReplaceAll(string(k), "_", " "), more)
		}
	}
}

// noticeLines is how many notices of one kind the text output shows:
// an inbox of thousands of files adopted at once is one line per file
// in the journal and with --json, not on a terminal.
const noticeLines = 10

// result is a one-object --json answer: it carries the pending notices.
type result interface{ setNotices([]noticeJSON) }

// print writes v as one JSON object with --json, with the pending
// notices in it, else runs text.
func (o *output) print(v result, text func(w io.Writer)) {
	if o.json {
		o.writeResult(o.stdout, v)
		return
	}
	text(o.stdout)
}

// writeResult writes v with the pending notices as its "notices" and
// clears them.
func (o *output) writeResult(w io.Writer, v result) {
	v.setNotices(o.takeNotices())
	o.writeJSON(w, v)
}

func (o *output) writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// fail reports err and returns its exit code. With --json the notices go
// into the one error object; otherwise they are printed first.
func (o *output) fail(err error) int {
	var status exitStatus
	if errors.As(err, &status) {
		o.flushNotices()
		return status.code
	}
	var silent silentExit
	if errors.As(err, &silent) {
		// The result (e.g. replay's findings) is already on stdout.
		if o.json {
			o.writeJSON(o.stderr, errorObject{Code: silent.code, Reason: fence.ReasonDrift, Message: "tree and journal disagree; see the findings on stdout", Notices: o.takeNotices()})
		} else {
			o.flushNotices()
		}
		return silent.code
	}
	obj := classify(err)
	if o.json {
		if o.reported != nil && errors.Is(err, o.reported) {
			return obj.Code
		}
		obj.Notices = o.takeNotices()
		o.writeJSON(o.stderr, obj)
		return obj.Code
	}
	o.flushNotices()
	fmt.Fprintf(o.stderr, "fencectl: %s\n", printable(obj.Message))
	return obj.Code
}

// reportError prints err as the one --json error object now, with run
// details, so that a run --loop that goes on after it still reports it
// exactly once; fail then prints nothing more for it.
func (o *output) reportError(err error, run *runJSON) {
	obj := classify(err)
	obj.Run, obj.Notices = run, o.takeNotices()
	o.writeJSON(o.stderr, obj)
	o.reported = err
}

func (o *output) takeNotices() []noticeJSON {
	return newNotices(o.pendingNotices())
}

// printable escapes control characters (ESC, BEL, CR, …) in text meant for
// a terminal, so that a hostile agent name, reason or file name cannot
// drive the reader's terminal. JSON output escapes them by itself.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// checkText refuses a value a user passes for the journal (an agent name,
// a reason) that breaks textRule.
func checkText(flag, s string) error {
	if why := textRule(flag, s); why != "" {
		return usagef("invalid --%s %s: %s", flag, strconv.QuoteToGraphic(truncate(s, 80)), why)
	}
	return nil
}

// textRule says what is wrong with a value for the journal, or "": the
// library's rule (fence.TextProblem), said before anything runs.
func textRule(flag, s string) string {
	return fence.TextProblem(s, maxText(flag))
}

// maxText bounds a text the journal keeps: an agent name is written into
// every event of its claims and echoed in refusals, a reason into its
// event. A 100 KB name was stored and printed back whole.
func maxText(flag string) int {
	if flag == "agent" {
		return fence.MaxAgentLen
	}
	return fence.MaxReasonLen
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
