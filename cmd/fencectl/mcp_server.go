//go:build !nomcp

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// The MCP server: one tool per operation, calling package fence as the
// commands do, answering with the commands' --json types. A refusal is a
// tool error carrying the --json error object and the next step.

func init() { serveMCP = runMCP }

// runMCP serves s until the client closes its end (or ctx ends).
func runMCP(ctx context.Context, s mcpSession) error {
	// A claim for a client that no longer reads the answers is not made
	// (claim_reader.go): the server would die of SIGPIPE writing its
	// token, and the task be held by nobody until its lease ran out.
	var readerGone func() bool
	if f, ok := s.out.(*os.File); ok {
		readerGone = func() bool { return noReader(f) }
	}
	srv := newMCPServer(s.tree, s.agent, s.notices, slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelWarn})), readerGone)
	fmt.Fprintf(s.log, "fencectl mcp: serving %s (%s) on stdio\n", s.tree.Root(), s.tree.Journal().Backend)
	out := &lineWriter{w: s.out}
	// checkedLines enforces the line limit and answers bad lines itself;
	// the SDK's own limit, counted over its read-ahead, is off.
	err := srv.Run(ctx, &mcp.IOTransport{Reader: checkedLines(s.in, out, mcpMaxLine), Writer: out, MaxLineLength: -1})
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) || ctx.Err() != nil {
		return nil // the client went away: the session is over, its claims are not
	}
	return fmt.Errorf("mcp session: %w", err)
}

// mcpServer holds what every tool call shares.
type mcpServer struct {
	tree    *fence.Tree
	agent   string // when a call names none
	notices *noticeBox
	// readerGone says the client no longer reads the answers (stdio);
	// nil: it always does.
	readerGone func() bool
}

// refuseNoReader refuses a claim whose answer nobody would read.
func (m *mcpServer) refuseNoReader() error {
	if m.readerGone != nil && m.readerGone() {
		return readerGoneError{}
	}
	return nil
}

// newMCPServer makes the server with every tool on tree.
func newMCPServer(t *fence.Tree, agent string, box *noticeBox, logger *slog.Logger, readerGone func() bool) *mcp.Server {
	m := &mcpServer{tree: t, agent: agent, notices: box, readerGone: readerGone}
	srv := mcp.NewServer(&mcp.Implementation{Name: "fencectl", Version: buildVersion()}, &mcp.ServerOptions{
		Instructions: mcpInstructions,
		Logger:       logger,
		Capabilities: &mcp.ServerCapabilities{},
	})
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	fenced := func(idempotent bool) *mcp.ToolAnnotations {
		return &mcp.ToolAnnotations{IdempotentHint: idempotent, DestructiveHint: new(false), OpenWorldHint: new(false)}
	}
	addTool(srv, m, "claim", "Claim one task: the one named by task, or the next ready one (highest priority, then oldest). Returns its fencing token: write the task and token into your notes before doing anything else; every later call on the task must show the token. With token set instead, restores a claim you hold (after a restart): same token, lease renewed, or refused if it was lost.", fenced(false), m.claim)
	addTool(srv, m, "claim_batch", "Claim several tasks in one step, each with its own token: the named tasks (all or none; with partial, those that can be), or up to batch ready ones.", fenced(false), m.claimBatch)
	addTool(srv, m, "heartbeat", "Extend the lease of a task you hold (every ttl/3 is a good rhythm). Refused if your token no longer holds the task: then stop work on it.", fenced(true), m.heartbeat)
	addTool(srv, m, "verify", "Check that your token still holds a task, before a side effect outside the tree. Changes nothing; refused if the token is stale.", readOnly, m.verify)
	addTool(srv, m, "complete", "Mark a task you hold as done, optionally storing a result text as out/TASK/result in the same step. Repeating a complete that succeeded answers success.", fenced(true), m.complete)
	addTool(srv, m, "release", "Give a task you hold back to available/ without counting an attempt.", fenced(true), m.release)
	addTool(srv, m, "fail", "Give up on a task you hold, counting one attempt (failed/ at max attempts).", fenced(true), m.fail)
	addTool(srv, m, "put", "Write an output of a task you hold to out/TASK/NAME, only while your token holds it; a later put of the same name replaces it.", fenced(true), m.put)
	addTool(srv, m, "status", "Counts per state, the live leases and the tree's defaults.", readOnly, m.status)
	addTool(srv, m, "show", "One task: its record, lease and recent events.", readOnly, m.show)
	addTool(srv, m, "list", "The tasks in id order, a page at a time (state, agent, limit, after).", readOnly, m.list)
	addTool(srv, m, "log", "The audit trail, oldest first: the newest limit events (task, since).", readOnly, m.log)
	return srv
}

const mcpInstructions = `fencectl hands out tasks from a shared tree under leases with fencing tokens.
Claim a task, write its id and token into your notes at once, work, heartbeat
within the lease, then complete (or release, or fail). Every call on a task
shows its token. A tool error carries "reason" and "next": do what "next"
says. A stale token means another agent has the task now: stop work on it and
never retry with another token. After a restart, resume from your notes with
verify or claim (task and token).`

// addTool registers a tool whose handler answers with out (the --json
// type) or refuses with err (see refusal). The schemas are In's and Out's.
//
// The SDK's typed handlers (mcp.AddTool) are not used: they pass the
// arguments and the output through map[string]any, where a token above
// 2^53 loses its last digits as a float64, and a refusal could not carry
// its structured content. Here the arguments are checked against the
// schema, then decoded into In from their own bytes, and the answer is
// marshalled once, as the commands marshal it.
func addTool[In any, Out result](srv *mcp.Server, m *mcpServer, name, desc string, ann *mcp.ToolAnnotations, h func(context.Context, In) (Out, error)) {
	inSchema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", name, err))
	}
	inResolved, err := inSchema.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: input schema: %v", name, err))
	}
	rt := reflect.TypeFor[Out]()
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	outSchema, err := jsonschema.ForType(rt, &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		// A batch's failures hold error objects, which nest (failed):
		// described, not spelled out.
		reflect.TypeFor[errorObject](): {Type: "object", Description: "why a task was not claimed: an error object as --json prints it (code, reason, message, task, ...)"},
	}})
	if err != nil {
		panic(fmt.Sprintf("tool %s: output schema: %v", name, err))
	}
	srv.AddTool(&mcp.Tool{Name: name, Description: desc, Annotations: ann, InputSchema: inSchema, OutputSchema: outSchema},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in In
			if err := decodeArguments(req.Params.Arguments, inSchema, inResolved, &in); err != nil {
				return m.refusal(err), nil
			}
			out, err := h(ctx, in)
			if err != nil {
				return m.refusal(err), nil
			}
			out.setNotices(m.notices.take())
			return answer(out), nil
		})
}

// decodeArguments checks a call's arguments against the tool's input
// schema and decodes them into in.
func decodeArguments(raw json.RawMessage, plain *jsonschema.Schema, schema *jsonschema.Resolved, in any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	var loose map[string]any // numbers as float64: for the schema's checks only
	if err := json.Unmarshal(raw, &loose); err != nil {
		return usagef("the arguments are not a JSON object: %v", err)
	}
	if err := describeMismatch(plain, loose); err != nil {
		return err
	}
	if err := schema.Validate(loose); err != nil {
		return usagef("%v (see the tool's input schema)", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		return usagef("invalid arguments: %v (see the tool's input schema)", err)
	}
	return nil
}

// answer is a tool's result: v as structured content and, for clients
// that read text only, the same JSON as text.
func answer(v any) *mcp.CallToolResult {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "marshal the answer: " + err.Error()}}}
	}
	text := bytes.TrimSpace(b.Bytes())
	return &mcp.CallToolResult{StructuredContent: json.RawMessage(text), Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}
}

// toolError is a refusal's structured content: the --json error object
// and the next step.
type toolError struct {
	errorObject
	Next string `json:"next"`
}

// refusal is err as a tool error.
func (m *mcpServer) refusal(err error) *mcp.CallToolResult {
	obj := classify(err)
	var invalid *fence.InvalidInputError
	if errors.As(err, &invalid) {
		// The CLI names flags (--ttl); a tool names its fields (ttl).
		name, ok := mcpFieldOf[invalid.Input]
		if !ok {
			name = strings.ReplaceAll(string(invalid.Input), "_", " ")
		}
		obj.Message = reword(err, invalid, invalid.Describe(name))
	}
	if errors.Is(err, fence.ErrBusy) {
		obj.Message = err.Error() + " (the server's --timeout / FENCE_TIMEOUT)"
	}
	var notAv *fence.NotAvailableError
	if errors.As(err, &notAv) && (notAv.Blocked() || notAv.Wait != nil) {
		// The CLI's hint names commands and flags; the next step says
		// what to do in the tools' own words.
		obj.Message = err.Error()
	}
	obj.Notices = m.notices.take()
	res := answer(toolError{errorObject: obj, Next: nextStep(obj)})
	res.IsError = true
	return res
}

// mcpFieldOf names the tool field that sets each of the domain's inputs.
var mcpFieldOf = map[fence.Input]string{
	fence.InputTTL:        "ttl",
	fence.InputWait:       "wait",
	fence.InputLimit:      "limit",
	fence.InputState:      "state",
	fence.InputAfter:      "after",
	fence.InputRequestID:  "request_id",
	fence.InputToken:      "token",
	fence.InputID:         "task",
	fence.InputBatch:      "batch",
	fence.InputOutputName: "name",
}

// nextSteps is the one thing an agent should do after each refusal.
var nextSteps = map[string]string{
	fence.ReasonStaleToken:     "stop work on this task; do not retry with another token",
	fence.ReasonLeaseExpired:   "your lease ran out: stop work on this task; do not retry with another token (claim again only if you start over)",
	fence.ReasonNotHeld:        "this token does not hold this task: stop work on it; do not retry with another token",
	fence.ReasonNothingToClaim: "no task is ready: wait and try again later (or claim with wait set)",
	fence.ReasonNotAvailable:   "this task cannot be claimed now: claim another one (leave task out for the next ready one) or try later",
	fence.ReasonBlocked:        "this task waits for others to finish (waits_for names them): claim another one (leave task out), or claim it again with wait set; do not work on it before it is yours",
	fence.ReasonScheduled:      "this task is scheduled for later (the message says when): claim another one (leave task out), or claim it again after that time or with wait set",
	fence.ReasonBackingOff:     "this task backs off after a failed attempt (the message says until when): claim another one (leave task out), or claim it again after that time or with wait set",
	fence.ReasonBusy:           "the tree was busy: retry the same call",
	fence.ReasonNoSuchTask:     "check the task id (the list tool shows the tasks); do not guess ids",
	fence.ReasonInvalidInput:   "fix the input the message names and call again",
	fence.ReasonIOError:        operatorStep,
	fence.ReasonCorruptJournal: operatorStep,
	fence.ReasonJournalVersion: "stop and tell your operator: the journal was written by a newer fencectl; this server must be upgraded; retrying will not help",
	fence.ReasonNotOwner:       "stop and tell your operator: this server runs as root on a tree another user owns, and root may only read it; run the server as the tree's owner; retrying will not help",
	fence.ReasonDrift:          "stop and tell your operator: the tree's files and its journal disagree (fencectl replay repairs it); retrying will not help",
}

// operatorStep is the next step after a failure no agent can mend.
const operatorStep = "stop and tell your operator: the message says what is wrong with the tree; retrying will not help"

func nextStep(obj errorObject) string {
	if s, ok := nextSteps[obj.Reason]; ok {
		return s
	}
	return operatorStep
}

// agentOr is the call's agent name, checked, or the server's.
func (m *mcpServer) agentOr(a string) (string, error) {
	if a == "" {
		return m.agent, nil
	}
	return a, checkField("agent", a)
}

// checkField refuses control characters in a text the journal keeps, and
// one longer than it keeps (maxText).
func checkField(name, s string) error {
	if n := maxText(name); len(s) > n {
		return usagef("invalid %s: %d bytes long, at most %d allowed", name, len(s), n)
	}
	if err := checkText(name, s); err != nil {
		return usagef("invalid %s: control characters are not allowed", name)
	}
	return nil
}

// duration reads a duration field: "" is 0 (the default); else a Go
// duration, positive unless zeroOK.
func duration(name, s string, zeroOK bool) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, usagef("invalid %s %q: give a duration such as 90s, 30m or 1h", name, s)
	case d < 0 || d == 0 && !zeroOK:
		return 0, usagef("invalid %s %q: must be positive; leave %s out for the default", name, s, name)
	}
	return d, nil
}

// The tools' inputs. A field without omitempty is required.

type claimIn struct {
	Task      string   `json:"task,omitempty" jsonschema:"the task to claim; leave out to claim the next ready one"`
	Agent     string   `json:"agent,omitempty" jsonschema:"your agent name, recorded in the journal (default: the server's --agent); never authorises anything"`
	TTL       string   `json:"ttl,omitempty" jsonschema:"lease length, a duration such as 30m or 1h (default: the tree's)"`
	Wait      string   `json:"wait,omitempty" jsonschema:"keep trying this long while nothing is ready, e.g. 2m (default: answer at once)"`
	Token     uint64   `json:"token,omitempty" jsonschema:"restore a claim you hold: its token, from your notes; renews the lease if it is still current, refused if it was lost"`
	RequestID string   `json:"request_id,omitempty" jsonschema:"idempotency key: repeating the call with the same agent and key returns the same claim while it is current"`
	Labels    []string `json:"labels,omitempty" jsonschema:"with no task named: only a ready task that carries every one of these labels (the rarest first)"`
}

type claimBatchIn struct {
	Tasks   []string `json:"tasks,omitempty" jsonschema:"the tasks to claim together: all or none, unless partial"`
	Batch   int      `json:"batch,omitempty" jsonschema:"with no tasks named: claim up to this many ready tasks"`
	Partial bool     `json:"partial,omitempty" jsonschema:"with tasks named: claim those that can be, report the rest"`
	Agent   string   `json:"agent,omitempty" jsonschema:"your agent name, recorded in the journal (default: the server's --agent)"`
	TTL     string   `json:"ttl,omitempty" jsonschema:"lease length of each claim, e.g. 30m (default: the tree's)"`
	Wait    string   `json:"wait,omitempty" jsonschema:"keep trying this long while nothing can be claimed, e.g. 2m"`
	Labels  []string `json:"labels,omitempty" jsonschema:"with batch: only ready tasks that carry every one of these labels (the rarest first)"`
}

type fencedIn struct {
	Task  string `json:"task" jsonschema:"the task id"`
	Token uint64 `json:"token" jsonschema:"the fencing token your claim returned"`
	Agent string `json:"agent,omitempty" jsonschema:"your agent name, recorded in the journal; never authorises anything"`
}

type heartbeatIn struct {
	fencedIn
	TTL string `json:"ttl,omitempty" jsonschema:"new lease length from now, e.g. 30m (default: the claim's own)"`
}

type completeIn struct {
	fencedIn
	Result *string `json:"result,omitempty" jsonschema:"optional result text, stored as out/TASK/result with the completion"`
}

type reasonIn struct {
	fencedIn
	Reason string `json:"reason,omitempty" jsonschema:"why, recorded in the journal"`
}

type putIn struct {
	fencedIn
	Name    string `json:"name" jsonschema:"the output's file name (the task id rule: letters, digits, . _ -)"`
	Content string `json:"content" jsonschema:"the output's content (text)"`
}

type taskIn struct {
	Task string `json:"task" jsonschema:"the task id"`
}

type listIn struct {
	State string `json:"state,omitempty" jsonschema:"only tasks in this state (waiting, available, claimed, done, failed)"`
	Agent string `json:"agent,omitempty" jsonschema:"only the tasks this agent holds"`
	Limit *int   `json:"limit,omitempty" jsonschema:"at most this many tasks (default 100; at most 1000, 0 included: go on with after)"`
	After string `json:"after,omitempty" jsonschema:"start after this task id: the last id of the previous page"`
}

type logIn struct {
	Task       string `json:"task,omitempty" jsonschema:"only this task's events"`
	Since      string `json:"since,omitempty" jsonschema:"only events since a time (RFC 3339) or a duration ago (90m)"`
	Limit      *int   `json:"limit,omitempty" jsonschema:"only the newest this many events (default 100; at most 1000, 0 included)"`
	Heartbeats bool   `json:"heartbeats,omitempty" jsonschema:"include heartbeat events"`
}

type noInput struct{}

// listJSON is list's answer as one object: the page (the objects list
// --json prints) and whether more tasks follow it.
type listJSON struct {
	More bool `json:"more"`
	notices
	Tasks []*taskJSON `json:"tasks"`
}

// logJSON is log's answer as one object: the events log --json prints,
// one per line.
type logJSON struct {
	Events []eventJSON `json:"events"`
	More   bool        `json:"more"` // older events precede these (the page was full)
	notices
}

// The tools.

// claimerArgs checks what both claim tools take: who claims, the lease
// length and how long to wait.
func (m *mcpServer) claimerArgs(agent, ttl, wait string) (string, time.Duration, time.Duration, error) {
	agent, err := m.agentOr(agent)
	if err != nil {
		return "", 0, 0, err
	}
	t, err := duration("ttl", ttl, false)
	if err != nil {
		return "", 0, 0, err
	}
	w, err := duration("wait", wait, true)
	return agent, t, w, err
}

func (m *mcpServer) claim(ctx context.Context, in claimIn) (*claimJSON, error) {
	agent, ttl, wait, err := m.claimerArgs(in.Agent, in.TTL, in.Wait)
	if err != nil {
		return nil, err
	}
	if in.Token != 0 && (in.RequestID != "" || in.Wait != "") {
		return nil, usagef("token restores a claim you hold; request_id and wait are for a new claim: give one or the other")
	}
	if err := m.refuseNoReader(); err != nil {
		return nil, err
	}
	res, err := m.tree.Claim(ctx, fence.ClaimRequest{ID: in.Task, Agent: agent, TTL: ttl, Wait: wait, Token: in.Token, RequestID: in.RequestID, Labels: in.Labels})
	m.noteReaps(res.Reaped)
	if err != nil {
		return nil, err
	}
	if !res.Renewed {
		if err := m.undoIfGone(ctx, res); err != nil {
			return nil, err
		}
	}
	return newClaim(res), nil
}

// undoIfGone undoes claims made while their client went away: the
// request's context ends when the client closes its side (stdin's EOF),
// and an answer is not written after that, so the claims would be held
// by tokens nobody has until their TTL, then reaped as attempts. The
// CLI does the same for an answer it cannot write (UndoClaim).
func (m *mcpServer) undoIfGone(ctx context.Context, claims ...fence.ClaimResult) error {
	if ctx.Err() == nil {
		return nil
	}
	why := fmt.Errorf("the MCP client went away before its answer (%v)", context.Cause(ctx))
	undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), fence.DefaultTimeout)
	defer cancel()
	var first error
	for _, c := range claims {
		if err := m.tree.UndoClaim(undo, c, why); first == nil {
			first = err
		}
	}
	return first
}

func (m *mcpServer) claimBatch(ctx context.Context, in claimBatchIn) (*batchJSON, error) {
	switch {
	case len(in.Tasks) == 0 && in.Batch == 0:
		return nil, usagef("name the tasks (tasks) or say how many ready ones to take (batch); for one task use the claim tool")
	case len(in.Tasks) > 0 && in.Batch != 0:
		return nil, usagef("batch takes the next ready tasks; it does not go with named tasks %q", in.Tasks)
	case in.Partial && len(in.Tasks) == 0:
		return nil, usagef("partial is for named tasks: name them in tasks")
	case in.Batch < 0:
		return nil, usagef("invalid batch %d: must be at least 1", in.Batch)
	}
	agent, ttl, wait, err := m.claimerArgs(in.Agent, in.TTL, in.Wait)
	if err != nil {
		return nil, err
	}
	if err := m.refuseNoReader(); err != nil {
		return nil, err
	}
	res, err := m.tree.ClaimBatch(ctx, fence.BatchClaimRequest{IDs: in.Tasks, Count: in.Batch, Partial: in.Partial, Agent: agent, TTL: ttl, Wait: wait, Labels: in.Labels})
	m.noteReaps(res.Reaped)
	if err != nil {
		return nil, err
	}
	if err := m.undoIfGone(ctx, res.Assigned...); err != nil {
		return nil, err
	}
	return newBatch(res), nil
}

// noteReaps reports the leases a claim freed first, as the CLI does.
func (m *mcpServer) noteReaps(rs []fence.Reaped) {
	for _, r := range rs {
		m.notices.add(fence.Notice{Kind: fence.NoticeReaped, Name: r.Task, Detail: describeReap(r)})
	}
}

// request checks a fenced call's common fields.
func (m *mcpServer) request(in fencedIn) (fence.FencedRequest, error) {
	if err := fence.ValidateID(in.Task); err != nil {
		return fence.FencedRequest{}, err
	}
	if in.Token == 0 {
		return fence.FencedRequest{}, usagef("missing token: every call on a claimed task must show the token its claim returned")
	}
	if in.Agent != "" {
		if err := checkField("agent", in.Agent); err != nil {
			return fence.FencedRequest{}, err
		}
	}
	return fence.FencedRequest{ID: in.Task, Token: in.Token, Agent: in.Agent}, nil
}

// fencedResult is a fenced operation's answer, as the commands print it.
func fencedResult(req fence.FencedRequest, res fence.Result, err error) (*fencedJSON, error) {
	if err != nil {
		return nil, err
	}
	return fencedAnswer(res, req.Token), nil
}

func (m *mcpServer) heartbeat(ctx context.Context, in heartbeatIn) (*fencedJSON, error) {
	req, err := m.request(in.fencedIn)
	if err != nil {
		return nil, err
	}
	if req.TTL, err = duration("ttl", in.TTL, false); err != nil {
		return nil, err
	}
	res, err := m.tree.Heartbeat(ctx, req)
	return fencedResult(req, res, err)
}

func (m *mcpServer) verify(ctx context.Context, in fencedIn) (*fencedJSON, error) {
	req, err := m.request(in)
	if err != nil {
		return nil, err
	}
	rec, err := m.tree.Verify(ctx, req)
	if err != nil {
		return nil, err
	}
	j := newFenced(rec, m.tree.Path(rec.ID, rec.State), req.Token, false, nil)
	j.Current = true
	return j, nil
}

func (m *mcpServer) complete(ctx context.Context, in completeIn) (*fencedJSON, error) {
	req, err := m.request(in.fencedIn)
	if err != nil {
		return nil, err
	}
	if in.Result != nil {
		req.Result = strings.NewReader(*in.Result)
	}
	res, err := m.tree.Complete(ctx, req)
	return fencedResult(req, res, err)
}

func (m *mcpServer) release(ctx context.Context, in reasonIn) (*fencedJSON, error) {
	req, err := m.reasoned(in)
	if err != nil {
		return nil, err
	}
	res, err := m.tree.Release(ctx, req)
	return fencedResult(req, res, err)
}

func (m *mcpServer) fail(ctx context.Context, in reasonIn) (*fencedJSON, error) {
	req, err := m.reasoned(in)
	if err != nil {
		return nil, err
	}
	res, err := m.tree.Fail(ctx, req)
	return fencedResult(req, res, err)
}

func (m *mcpServer) reasoned(in reasonIn) (fence.FencedRequest, error) {
	req, err := m.request(in.fencedIn)
	if err != nil {
		return req, err
	}
	req.Reason = in.Reason
	return req, checkField("reason", in.Reason)
}

func (m *mcpServer) put(ctx context.Context, in putIn) (*fencedJSON, error) {
	req, err := m.request(in.fencedIn)
	if err != nil {
		return nil, err
	}
	if err := fence.ValidateOutputName(in.Name); err != nil {
		return nil, err
	}
	res, err := m.tree.Put(ctx, req, in.Name, strings.NewReader(in.Content))
	if err != nil {
		return nil, err
	}
	j := fencedAnswer(res, req.Token)
	j.Output, j.Name = m.tree.OutputPath(req.ID, in.Name), in.Name
	return j, nil
}

func (m *mcpServer) status(ctx context.Context, _ noInput) (*statusJSON, error) {
	st, err := m.tree.Status(ctx)
	if err != nil {
		return nil, err
	}
	return redactStatus(newStatus(st)), nil
}

func (m *mcpServer) show(ctx context.Context, in taskIn) (*showJSON, error) {
	v, err := m.tree.Show(ctx, in.Task)
	if err != nil {
		return nil, err
	}
	return redactShow(newShow(v)), nil
}

func (m *mcpServer) list(ctx context.Context, in listIn) (*listJSON, error) {
	limit := pageLimit(in.Limit, defaultListLimit)
	if in.Agent != "" {
		if err := checkField("agent", in.Agent); err != nil {
			return nil, err
		}
	}
	p, err := m.tree.List(ctx, fence.ListFilter{State: record.State(in.State), Agent: in.Agent, After: in.After, Limit: limit})
	if err != nil {
		return nil, err
	}
	tasks := make([]*taskJSON, 0, len(p.Tasks))
	for _, r := range p.Tasks {
		tasks = append(tasks, newTask(r, m.tree.Path(r.ID, r.State)))
	}
	redactTasks(tasks)
	return &listJSON{More: p.More, Tasks: tasks}, nil
}

// defaultLogLimit is how many of the newest events log answers with unless
// told: an agent's context is not the place for a whole audit trail.
const defaultLogLimit = 100

// maxMCPPage bounds a list or log answer, as serve bounds its pages: one
// answer of a whole tree of a million tasks was 454 MB and took the server
// to 6 GB (found from outside).
const maxMCPPage = 1000

// pageLimit is the limit asked (def if none), at most maxMCPPage; 0 is
// that much. A negative one is left for the tree to refuse.
func pageLimit(asked *int, def int) int {
	switch {
	case asked == nil:
		return def
	case *asked == 0 || *asked > maxMCPPage:
		return maxMCPPage
	}
	return *asked
}

func (m *mcpServer) log(ctx context.Context, in logIn) (*logJSON, error) {
	limit := pageLimit(in.Limit, defaultLogLimit)
	var since time.Time
	if in.Since != "" {
		var err error
		if since, err = parseSince(in.Since); err != nil {
			return nil, usagef("invalid since %q: give a time (2026-11-21T09:00:00Z) or a duration ago (90m)", in.Since)
		}
	}
	ask := limit
	if limit > 0 {
		ask++ // one more than asked: whether older ones precede them
	}
	evs, err := m.tree.Log(ctx, fence.LogFilter{Task: in.Task, Since: since, Limit: ask, Heartbeats: in.Heartbeats})
	if err != nil {
		return nil, err
	}
	more := limit > 0 && len(evs) > limit
	if more {
		evs = evs[1:]
	}
	events := newEvents(evs)
	redactEvents(events)
	return &logJSON{Events: events, More: more}, nil
}

// describeMismatch names, in an agent's words, the first argument that
// does not fit the tool's schema: one the tool does not take, one of the
// wrong JSON type, or a required one left out. The schema's own checks
// (run next) cover the rest, in the validator's words.
func describeMismatch(schema *jsonschema.Schema, args map[string]any) error {
	names := slices.Sorted(maps.Keys(schema.Properties))
	for _, name := range slices.Sorted(maps.Keys(args)) {
		prop, ok := schema.Properties[name]
		if !ok {
			return usagef("unknown argument %q: this tool takes %s", name, strings.Join(names, ", "))
		}
		want := prop.Types
		if prop.Type != "" {
			want = []string{prop.Type}
		}
		if got := jsonType(args[name]); len(want) > 0 && !slices.Contains(want, got) && !(got == "integer" && slices.Contains(want, "number")) {
			return usagef("invalid %s: got a JSON %s, want %s", name, got, strings.Join(want, " or "))
		}
	}
	for _, name := range schema.Required {
		if _, ok := args[name]; !ok {
			return usagef("missing %s: this tool requires %s", name, strings.Join(schema.Required, ", "))
		}
	}
	return nil
}

// jsonType is the JSON Schema type of a value decoded into any.
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if x == math.Trunc(x) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}
