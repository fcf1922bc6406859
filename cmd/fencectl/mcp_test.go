//go:build !nomcp

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/fencectl/fencectl/fence"
)

// The MCP server through the SDK's own client: over its in-memory
// transport (the server in this process, on a tree the real binary made)
// and over the command transport (`fencectl --dir D mcp`, the real binary
// in its own process), on every journal backend.

// TestMCP runs every MCP test on each backend; the subtests share the
// backend (one etcd), each on a tree of its own.
func TestMCP(t *testing.T) {
	for _, b := range scriptBackends {
		t.Run(b.name, func(t *testing.T) {
			env := b.start(t)
			newTree := func(t *testing.T) *mcpTree { return newMCPTree(t, b.name, env()) }
			t.Run("ListTools", func(t *testing.T) { testMCPListTools(t, newTree(t)) })
			for _, via := range []string{"memory", "binary"} {
				t.Run("EveryTool/"+via, func(t *testing.T) { testMCPEveryTool(t, newTree(t), via) })
			}
			t.Run("Refusals", func(t *testing.T) { testMCPRefusals(t, newTree(t)) })
			t.Run("SessionEndsHoldingClaim", func(t *testing.T) { testMCPSessionEnds(t, newTree(t)) })
		})
	}
}

// mcpTree is a tree made and inspected by the real binary, served by MCP
// sessions.
type mcpTree struct {
	t       *testing.T
	backend string
	dir     string
	env     []string
}

func newMCPTree(t *testing.T, backend string, env map[string]string) *mcpTree {
	m := &mcpTree{t: t, backend: backend, dir: filepath.Join(t.TempDir(), "tree")}
	for k, v := range env {
		m.env = append(m.env, k+"="+v)
	}
	m.mustCLI("init", "--retry-backoff", "0s") // the tools' outcomes without a backoff after fail
	return m
}

// cli runs the real binary on the tree: its stdout and exit code.
func (m *mcpTree) cli(args ...string) (string, int) {
	m.t.Helper()
	c := fencectlCmd(m.dir, args...)
	c.Env = append(c.Env, m.env...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	return string(out), clitest.ExitCode(err)
}

func (m *mcpTree) mustCLI(args ...string) string {
	m.t.Helper()
	out, code := m.cli(args...)
	if code != 0 {
		m.t.Fatalf("fencectl %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// journal is everything the journal says, heartbeats included: equal
// before and after a refusal means the refusal changed nothing.
func (m *mcpTree) journal() string {
	m.t.Helper()
	return m.mustCLI("log", "--heartbeats", "--json") + m.mustCLI("list", "--json")
}

// inMemory serves the tree from this process over the SDK's in-memory
// transport, with the lock timeout given (0: the default).
func (m *mcpTree) inMemory(timeout time.Duration) *mcp.ClientSession {
	m.t.Helper()
	box := &noticeBox{}
	tree, err := fence.Open(m.dir, fence.Options{Notify: box.add, Clock: testClock, Timeout: timeout})
	if err != nil {
		m.t.Fatal(err)
	}
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := newMCPServer(tree, "agent-default", box, nil, nil).Connect(ctx, st, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		tree.Close()
	})
	return cs
}

// binary starts `fencectl --dir D mcp` (the test binary as fencectl) and
// connects to it; stderr collects what the server logs.
func (m *mcpTree) binary(stderr *bytes.Buffer) *mcp.ClientSession {
	m.t.Helper()
	c := fencectlCmd(m.dir, "--dir", m.dir, "mcp", "--agent", "agent-default")
	c.Env = append(c.Env, m.env...)
	c.Stderr = stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: c}, nil)
	if err != nil {
		m.t.Fatalf("start fencectl mcp: %v\n%s", err, stderr)
	}
	m.t.Cleanup(func() { cs.Close() })
	return cs
}

func (m *mcpTree) session(via string) *mcp.ClientSession {
	if via == "binary" {
		return m.binary(&bytes.Buffer{})
	}
	return m.inMemory(0)
}

// call calls a tool that must succeed and decodes its structured content
// into out.
func call[T any](t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) T {
	t.Helper()
	res := callRaw(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: refused: %s", name, args, contentText(res))
	}
	var out T
	decodeContent(t, res, &out)
	return out
}

// refuse calls a tool that must be refused and returns the error object.
func refuse(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (toolError, string) {
	t.Helper()
	res := callRaw(t, cs, name, args)
	if !res.IsError {
		t.Fatalf("%s %v: not refused: %s", name, args, contentText(res))
	}
	var e toolError
	decodeContent(t, res, &e)
	if e.Next == "" || e.Message == "" || e.Reason == "" {
		t.Errorf("%s %v: refusal lacks reason, message or next: %s", name, args, contentText(res))
	}
	whole, _ := json.Marshal(res)
	return e, string(whole)
}

func callRaw(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

func decodeContent(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	if res.StructuredContent == nil {
		t.Fatalf("no structured content: %s", contentText(res))
	}
	// The text is the same JSON, with its numbers as they were sent: the
	// SDK's client decodes the structured content into float64s.
	b := []byte(contentText(res))
	if err := json.Unmarshal(b, new(map[string]any)); err != nil {
		t.Fatalf("the text content is not one JSON object: %v\n%s", err, b)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func contentText(res *mcp.CallToolResult) string {
	var s []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s = append(s, tc.Text)
		}
	}
	return strings.Join(s, "\n")
}

var mcpToolNames = []string{"claim", "claim_batch", "complete", "fail", "heartbeat", "list", "log", "put", "release", "show", "status", "verify"}

// testMCPListTools: every tool is listed with a description, an input
// schema whose fields are described, and an output schema; the fenced
// tools require the task and the token.
func testMCPListTools(t *testing.T, m *mcpTree) {
	cs := m.inMemory(0)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s: no description", tool.Name)
		}
		in, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(in, &schema); err != nil || schema.Type != "object" {
			t.Errorf("%s: input schema %s", tool.Name, in)
		}
		for field, p := range schema.Properties {
			if !strings.Contains(string(p), `"description"`) {
				t.Errorf("%s: field %s has no description", tool.Name, field)
			}
		}
		switch tool.Name {
		case "heartbeat", "verify", "complete", "release", "fail", "put":
			if !slices.Contains(schema.Required, "task") || !slices.Contains(schema.Required, "token") {
				t.Errorf("%s: task and token are not required: %s", tool.Name, in)
			}
		}
		if out, _ := json.Marshal(tool.OutputSchema); !strings.Contains(string(out), `"properties"`) {
			t.Errorf("%s: output schema %s", tool.Name, out)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, mcpToolNames) {
		t.Errorf("tools %v, want %v", names, mcpToolNames)
	}
}

// testMCPEveryTool calls every tool as an agent would through a task's
// life, and checks each answer against the tree.
func testMCPEveryTool(t *testing.T, m *mcpTree, via string) {
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		m.mustCLI("add", "--id", id)
	}
	cs := m.session(via)
	// What the tree notices on the way travels in the answer, as with --json.
	if err := os.WriteFile(filepath.Join(m.dir, "inbox", "bad@name"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	c := call[claimJSON](t, cs, "claim", map[string]any{"agent": "a1", "ttl": "1h"})
	if c.Task != "t1" || c.Agent != "a1" || c.Token == 0 || c.Renewed || c.Path != filepath.Join(m.dir, "claimed", "t1") {
		t.Fatalf("claim: %+v", c)
	}
	if len(c.Notices) != 1 || c.Notices[0].Notice != string(fence.NoticeInboxRejected) || c.Notices[0].Name != "bad@name" {
		t.Errorf("claim's notices: %+v, want the rejected inbox file", c.Notices)
	}
	tok := c.Token
	fenced := func(extra map[string]any) map[string]any {
		args := map[string]any{"task": "t1", "token": tok}
		for k, v := range extra {
			args[k] = v
		}
		return args
	}
	h := call[fencedJSON](t, cs, "heartbeat", fenced(map[string]any{"ttl": "2h"}))
	if h.Event != "heartbeat" || h.Lease == nil || h.Lease.Token != tok || !h.Lease.Deadline.After(c.Deadline) {
		t.Errorf("heartbeat: %+v (claim deadline %s)", h, c.Deadline)
	}
	if v := call[fencedJSON](t, cs, "verify", fenced(nil)); !v.Current || v.Event != "" || v.State != "claimed" {
		t.Errorf("verify: %+v", v)
	}
	p := call[fencedJSON](t, cs, "put", fenced(map[string]any{"name": "notes.txt", "content": "half way"}))
	if p.Name != "notes.txt" || p.Output != filepath.Join(m.dir, "out", "t1", "notes.txt") {
		t.Errorf("put: %+v", p)
	}
	if b, err := os.ReadFile(p.Output); err != nil || string(b) != "half way" {
		t.Errorf("put wrote %q, %v", b, err)
	}
	s := call[showJSON](t, cs, "show", map[string]any{"task": "t1"})
	if s.State != "claimed" || s.Lease == nil || s.Lease.Agent != "a1" || len(s.Events) < 2 {
		t.Errorf("show: %+v", s)
	}
	if l := call[listJSON](t, cs, "list", nil); len(l.Tasks) != 4 || l.More || l.Tasks[0].Task != "t1" {
		t.Errorf("list: %+v", l)
	}
	if l := call[listJSON](t, cs, "list", map[string]any{"limit": 2}); len(l.Tasks) != 2 || !l.More {
		t.Errorf("list limit 2: %+v", l)
	}
	if l := call[listJSON](t, cs, "list", map[string]any{"state": "claimed"}); len(l.Tasks) != 1 || l.Tasks[0].Task != "t1" {
		t.Errorf("list claimed: %+v", l)
	}
	lg := call[logJSON](t, cs, "log", map[string]any{"task": "t1"})
	if types := eventTypes(lg.Events); !slices.Equal(types, []string{"add", "claim", "put"}) {
		t.Errorf("log: %v", types)
	}
	if lg := call[logJSON](t, cs, "log", map[string]any{"task": "t1", "heartbeats": true}); len(lg.Events) != 4 {
		t.Errorf("log with heartbeats: %v", eventTypes(lg.Events))
	}
	st := call[statusJSON](t, cs, "status", nil)
	// Tokens read as 0 here (an agent never learns another's: mcp_redact.go).
	if st.Counts["claimed"] != 1 || st.Counts["available"] != 3 || len(st.Leases) != 1 || st.Leases[0].Token != 0 || st.LastToken != 0 {
		t.Errorf("status: %+v", st)
	}
	done := call[fencedJSON](t, cs, "complete", fenced(map[string]any{"result": "all good"}))
	if done.State != "done" || done.Event != "complete" || done.Retry {
		t.Errorf("complete: %+v", done)
	}
	if b, err := os.ReadFile(filepath.Join(m.dir, "out", "t1", "result")); err != nil || string(b) != "all good" {
		t.Errorf("complete stored result %q, %v", b, err)
	}
	if again := call[fencedJSON](t, cs, "complete", fenced(nil)); !again.Retry || again.State != "done" {
		t.Errorf("complete again: %+v", again)
	}

	c2 := call[claimJSON](t, cs, "claim", map[string]any{"task": "t2"})
	if c2.Agent != "agent-default" || c2.Token <= tok {
		t.Errorf("claim t2: %+v (after token %d)", c2, tok)
	}
	r := call[fencedJSON](t, cs, "release", map[string]any{"task": "t2", "token": c2.Token, "reason": "later"})
	if r.State != "available" || r.Attempts != 0 || r.Event != "release" {
		t.Errorf("release: %+v", r)
	}
	c3 := call[claimJSON](t, cs, "claim", map[string]any{"task": "t2", "agent": "a2"})
	f := call[fencedJSON](t, cs, "fail", map[string]any{"task": "t2", "token": c3.Token, "reason": "broke"})
	if f.State != "available" || f.Attempts != 1 || f.Event != "fail" || f.LastLease == nil || f.LastLease.Reason != "broke" {
		t.Errorf("fail: %+v", f)
	}
	b := call[batchJSON](t, cs, "claim_batch", map[string]any{"batch": 2, "agent": "a3"})
	if len(b.Assigned) != 2 || len(b.Failed) != 0 || b.Assigned[0].Agent != "a3" {
		t.Errorf("claim_batch: %+v", b)
	}
	partial := call[batchJSON](t, cs, "claim_batch", map[string]any{"tasks": []string{"t1", "t4"}, "partial": true})
	if len(partial.Assigned) != 1 || len(partial.Failed) != 1 || partial.Failed[0].Task != "t1" || partial.Failed[0].Reason != fence.ReasonNotAvailable {
		t.Errorf("claim_batch partial: %+v", partial)
	}
	m.mustCLI("replay", "--check")
}

func eventTypes(evs []eventJSON) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// testMCPRefusals: every kind of refusal is a tool error carrying the
// --json error object and the next step, and changes nothing. A stale
// token is told who holds the task and since when, never the token.
func testMCPRefusals(t *testing.T, m *mcpTree) {
	m.mustCLI("add", "--id", "t1")
	m.mustCLI("add", "--id", "b1", "--after", "t1")
	cs := m.inMemory(0)
	old := call[claimJSON](t, cs, "claim", map[string]any{"agent": "a1", "ttl": "1h"}).Token
	m.mustCLI("revoke", "t1")
	var now claimJSON
	if err := json.Unmarshal([]byte(m.mustCLI("claim", "t1", "--agent", "a2", "--json")), &now); err != nil {
		t.Fatal(err)
	}
	current := strconv.FormatUint(now.Token, 10)
	before := m.journal()

	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"heartbeat", map[string]any{"task": "t1", "token": old}},
		{"verify", map[string]any{"task": "t1", "token": old}},
		{"complete", map[string]any{"task": "t1", "token": old, "result": "mine"}},
		{"release", map[string]any{"task": "t1", "token": old}},
		{"fail", map[string]any{"task": "t1", "token": old}},
		{"put", map[string]any{"task": "t1", "token": old, "name": "x.txt", "content": "mine"}},
		{"claim", map[string]any{"task": "t1", "token": old}},
	} {
		e, whole := refuse(t, cs, tc.tool, tc.args)
		if e.Code != exitFenced || e.Reason != fence.ReasonStaleToken || e.YourToken != old || e.LostBy != "revoked" || e.LostAt == nil {
			t.Errorf("%s with a stale token: %+v", tc.tool, e)
		}
		if holder := e.Holder.val; holder == nil || *holder != "a2" || e.HeldSince.val == nil || e.HeldSince.val.IsZero() {
			t.Errorf("%s: holder %v since %v, want a2 and a time", tc.tool, e.Holder.val, e.HeldSince.val)
		}
		if e.Next != nextSteps[fence.ReasonStaleToken] || !strings.Contains(e.Next, "do not retry with another token") {
			t.Errorf("%s: next %q", tc.tool, e.Next)
		}
		if strings.Contains(whole, current) {
			t.Errorf("%s: the refusal shows the holder's token %s: %s", tc.tool, current, whole)
		}
	}
	// Nor does any tool that reads the tree: an agent refused as stale
	// would read the live token there and complete the task with it.
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"show", map[string]any{"task": "t1"}},
		{"status", nil},
		{"list", nil},
		{"log", nil},
		{"log", map[string]any{"task": "t1"}},
	} {
		if whole := contentText(callRaw(t, cs, tc.tool, tc.args)); strings.Contains(whole, current) {
			t.Errorf("%s %v shows the holder's token %s: %s", tc.tool, tc.args, current, whole)
		}
	}
	if e, whole := refuse(t, cs, "complete", map[string]any{"task": "t1", "token": 999}); e.Code != exitFenced || e.Reason != fence.ReasonNotHeld || strings.Contains(whole, current) {
		t.Errorf("complete with a token never issued: %+v", e)
	}
	// A token above 2^53 (no float64 holds it) arrives, and comes back,
	// with every digit.
	const big = 1<<60 + 1
	if e, _ := refuse(t, cs, "verify", map[string]any{"task": "t1", "token": uint64(big)}); e.YourToken != big || e.Reason != fence.ReasonNotHeld {
		t.Errorf("verify with token %d: your_token %d, reason %s", uint64(big), e.YourToken, e.Reason)
	}
	for _, tc := range []struct {
		tool   string
		args   map[string]any
		code   int
		reason string
		says   string // in the message
	}{
		{"claim", map[string]any{"task": "t1"}, exitNotAvailable, fence.ReasonNotAvailable, "t1 is claimed"},
		{"claim", nil, exitNotAvailable, fence.ReasonNothingToClaim, "nothing to claim"},
		{"claim", map[string]any{"task": "b1"}, exitNotAvailable, fence.ReasonBlocked, "t1"},
		{"claim_batch", map[string]any{"tasks": []string{"t1"}}, exitNotAvailable, fence.ReasonNotAvailable, ""},
		{"show", map[string]any{"task": "nope"}, exitNoSuchTask, fence.ReasonNoSuchTask, `"nope"`},
		{"heartbeat", map[string]any{"task": "nope", "token": old}, exitNoSuchTask, fence.ReasonNoSuchTask, `"nope"`},
		{"claim", map[string]any{"ttl": "soon"}, exitUsage, fence.ReasonInvalidInput, `invalid ttl "soon"`},
		{"claim", map[string]any{"wait": "-1s"}, exitUsage, fence.ReasonInvalidInput, "invalid wait"},
		{"claim", map[string]any{"task": "../etc"}, exitUsage, fence.ReasonInvalidInput, "../etc"},
		{"claim", map[string]any{"agent": "a\x1b[31m"}, exitUsage, fence.ReasonInvalidInput, "invalid agent"},
		{"claim", map[string]any{"agent": strings.Repeat("a", 257)}, exitUsage, fence.ReasonInvalidInput, "invalid agent: 257 bytes long, at most 256"},
		{"claim", map[string]any{"token": old, "wait": "1m"}, exitUsage, fence.ReasonInvalidInput, "give one or the other"},
		{"claim_batch", nil, exitUsage, fence.ReasonInvalidInput, "name the tasks"},
		{"heartbeat", map[string]any{"task": "t1"}, exitUsage, fence.ReasonInvalidInput, "token"},
		{"heartbeat", map[string]any{"task": "t1", "token": "x"}, exitUsage, fence.ReasonInvalidInput, "token"},
		{"heartbeat", map[string]any{"task": "t1", "token": 0}, exitUsage, fence.ReasonInvalidInput, "missing token"},
		{"heartbeat", map[string]any{"task": "t1", "token": old, "lease": "1h"}, exitUsage, fence.ReasonInvalidInput, "lease"},
		{"verify", map[string]any{"task": "t1", "token": -1}, exitUsage, fence.ReasonInvalidInput, "token"},
		{"verify", map[string]any{"task": "t1", "token": nil}, exitUsage, fence.ReasonInvalidInput, "invalid token: got a JSON null, want integer"},
		{"verify", map[string]any{"task": "t1", "token": 1.5}, exitUsage, fence.ReasonInvalidInput, "invalid token: got a JSON number, want integer"},
		{"verify", map[string]any{"task": "t1", "tokn": 7}, exitUsage, fence.ReasonInvalidInput, `unknown argument "tokn": this tool takes agent, task, token`},
		{"verify", map[string]any{"task": "t1"}, exitUsage, fence.ReasonInvalidInput, "missing token: this tool requires task, token"},
		{"put", map[string]any{"task": "t1", "token": now.Token, "name": "../x", "content": ""}, exitUsage, fence.ReasonInvalidInput, "../x"},
		{"list", map[string]any{"state": "lost"}, exitUsage, fence.ReasonInvalidInput, `invalid state "lost"`},
		{"log", map[string]any{"since": "yesterday"}, exitUsage, fence.ReasonInvalidInput, "invalid since"},
	} {
		e, _ := refuse(t, cs, tc.tool, tc.args)
		if e.Code != tc.code || e.Reason != tc.reason || !strings.Contains(e.Message, tc.says) || strings.Contains(e.Message, "--") {
			t.Errorf("%s %v: %+v, want code %d, reason %s, a message with %q and no flag name", tc.tool, tc.args, e, tc.code, tc.reason, tc.says)
		}
		if e.Next != nextSteps[tc.reason] {
			t.Errorf("%s %v: next %q, want %q", tc.tool, tc.args, e.Next, nextSteps[tc.reason])
		}
	}
	if after := m.journal(); after != before {
		t.Errorf("refusals changed the journal:\nbefore %s\nafter  %s", before, after)
	}
	if _, err := os.Stat(filepath.Join(m.dir, "out", "t1")); !os.IsNotExist(err) {
		t.Errorf("a refused put or complete wrote out/t1: %v", err)
	}
	m.mustCLI("replay", "--check")

	if m.backend == "bolt" {
		// busy: another process holds the tree's lock past the timeout.
		busy := m.inMemory(fence.NoWait)
		f, err := os.OpenFile(filepath.Join(m.dir, ".fence", "lock"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		e, _ := refuse(t, busy, "heartbeat", map[string]any{"task": "t1", "token": now.Token})
		if e.Code != exitBusy || e.Reason != fence.ReasonBusy || e.Next != nextSteps[fence.ReasonBusy] || strings.Contains(e.Message, "--timeout /") && !strings.Contains(e.Message, "server's") {
			t.Errorf("heartbeat while the lock is held: %+v", e)
		}
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		if h := call[fencedJSON](t, busy, "heartbeat", map[string]any{"task": "t1", "token": now.Token}); h.Event != "heartbeat" {
			t.Errorf("heartbeat once the lock is free: %+v", h)
		}
	}
}

// testMCPSessionEnds: a session that ends while holding a claim leaves the
// claim as it is: the lease runs on until its TTL, no other agent gets the
// task, and the agent resumes from a new session with its token.
func testMCPSessionEnds(t *testing.T, m *mcpTree) {
	m.mustCLI("add", "--id", "t1")
	var log1 bytes.Buffer
	s1 := m.binary(&log1)
	c := call[claimJSON](t, s1, "claim", map[string]any{"agent": "a1", "ttl": "1h"})
	if err := s1.Close(); err != nil { // closes the server's stdin; waits for it to exit
		t.Fatalf("close session: %v\n%s", err, &log1)
	}
	if !strings.Contains(log1.String(), "fencectl mcp: serving "+m.dir) {
		t.Errorf("the server's log on stderr: %q", &log1)
	}
	var show showJSON
	if err := json.Unmarshal([]byte(m.mustCLI("show", "t1", "--json")), &show); err != nil {
		t.Fatal(err)
	}
	if show.State != "claimed" || show.Lease == nil || show.Lease.Token != c.Token || !show.Lease.Deadline.Equal(c.Deadline) {
		t.Fatalf("after the session ended: %+v, want the claim %+v as it was", show, c)
	}
	if out, code := m.cli("claim", "--agent", "a2"); code != exitNotAvailable {
		t.Errorf("another agent's claim: exit %d, want %d (the task is still held)\n%s", code, exitNotAvailable, out)
	}

	s2 := m.binary(&bytes.Buffer{})
	if e, _ := refuse(t, s2, "claim", map[string]any{"agent": "a3"}); e.Reason != fence.ReasonNothingToClaim {
		t.Errorf("claim from a new session: %+v, want nothing_to_claim", e)
	}
	if v := call[fencedJSON](t, s2, "verify", map[string]any{"task": "t1", "token": c.Token}); !v.Current {
		t.Errorf("verify from a new session: %+v", v)
	}
	if h := call[fencedJSON](t, s2, "heartbeat", map[string]any{"task": "t1", "token": c.Token}); h.Lease == nil || h.Lease.Token != c.Token {
		t.Errorf("heartbeat from a new session: %+v", h)
	}
	r := call[claimJSON](t, s2, "claim", map[string]any{"task": "t1", "token": c.Token})
	if !r.Renewed || r.Token != c.Token || r.Agent != "a1" {
		t.Errorf("restore from a new session: %+v, want the same claim renewed", r)
	}
	if d := call[fencedJSON](t, s2, "complete", map[string]any{"task": "t1", "token": c.Token}); d.State != "done" {
		t.Errorf("complete from a new session: %+v", d)
	}
	m.mustCLI("replay", "--check")
}

// TestMCPNextStep_EveryReason: every reason fence names (the const block
// of fence/errors.go, read from the source so that a new one cannot be
// missed) has a next step of its own, and only a failure no agent can
// mend sends the agent to its operator: a task that waits (blocked,
// scheduled, backing off) is a reason to claim another, not to give up.
func TestMCPNextStep_EveryReason(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "fence", "errors.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok && len(v.Names) == 1 && strings.HasPrefix(v.Names[0].Name, "Reason") && len(v.Values) == 1 {
			if lit, ok := v.Values[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				reasons = append(reasons, s)
			}
		}
		return true
	})
	if len(reasons) < 15 {
		t.Fatalf("found %d reasons in fence/errors.go: %v", len(reasons), reasons)
	}
	operator := map[string]bool{fence.ReasonIOError: true, fence.ReasonCorruptJournal: true, fence.ReasonJournalVersion: true, fence.ReasonDrift: true, fence.ReasonNotOwner: true}
	for _, r := range reasons {
		next, ok := nextSteps[r]
		switch {
		case !ok:
			t.Errorf("reason %s has no next step", r)
		case operator[r] != strings.Contains(next, "tell your operator"):
			t.Errorf("reason %s: next %q", r, next)
		}
	}
}

// TestMCP_NoReaderClaimsNothing: a client that stops reading the server's
// answers (its end of stdout closed) and then asks for a claim gets none
// made: the server would die of SIGPIPE writing the token, and the task be
// held by nobody until its lease ran out.
func TestMCP_NoReaderClaimsNothing(t *testing.T) {
	m := newMCPTree(t, "bolt", nil)
	m.mustCLI("add", "--id", "t1")
	c := fencectlCmd(m.dir, "--dir", m.dir, "mcp")
	c.Env = append(c.Env, m.env...)
	stdin, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout = w
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r.Close() // the client stops reading
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"claim","arguments":{"task":"t1"}}}`)
	time.Sleep(300 * time.Millisecond) // the server handles the call
	stdin.Close()
	_ = c.Wait()
	if st := m.mustCLI("show", "t1", "--json"); !strings.Contains(st, `"state":"available"`) {
		t.Errorf("t1 after a claim whose answer nobody read:\n%s", st)
	}
}

// TestMCP_ClientGoneAfterCommitHoldsNothing: a client that closes its
// side while its claim commits never gets the answer (the SDK writes
// none after that), so the claim is undone at once rather than held by a
// token nobody has until its TTL, then reaped as an attempt.
func TestMCP_ClientGoneAfterCommitHoldsNothing(t *testing.T) {
	for _, tool := range []string{"claim", "claim_batch"} {
		t.Run(tool, func(t *testing.T) {
			m := newMCPTree(t, "bolt", nil)
			m.mustCLI("add", "--id", "t1")
			mark := filepath.Join(t.TempDir(), "mark")
			c := fencectlCmd(m.dir, "--dir", m.dir, "mcp")
			c.Env = append(c.Env, m.env...)
			c.Env = append(c.Env, "FENCE_CRASH=claim:after-commit", "FENCE_CRASH_ACTION=pause",
				"FENCE_CRASH_PAUSE=500ms", "FENCE_CRASH_MARK="+mark)
			stdin, err := c.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := c.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			answers := bufio.NewReader(stdout)
			fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			if _, err := answers.ReadString('\n'); err != nil {
				t.Fatalf("initialize: %v", err)
			}
			fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			args := `{"task":"t1"}`
			if tool == "claim_batch" {
				args = `{"tasks":["t1"]}`
			}
			fmt.Fprintf(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":%s}}`+"\n", tool, args)
			clitest.WaitFile(t, mark) // committed, not yet answered
			stdin.Close()
			rest, _ := io.ReadAll(answers)
			_ = c.Wait()
			if bytes.Contains(rest, []byte(`"token"`)) {
				t.Fatalf("the claim was answered after all; the test proves nothing:\n%s", rest)
			}
			if st := m.mustCLI("show", "t1", "--json"); !strings.Contains(st, `"state":"available"`) {
				t.Errorf("t1 after a claim whose client went away before its answer:\n%s", st)
			}
			if log := m.mustCLI("log", "--task", "t1"); !strings.Contains(log, "claim undone: the MCP client went away") {
				t.Errorf("the log does not say why the claim was undone:\n%s", log)
			}
		})
	}
}

// TestMCP_ClaimByLabel: an MCP agent takes only tasks with its labels, as
// `claim --label` does, one at a time or as a batch.
func TestMCP_ClaimByLabel(t *testing.T) {
	m := newMCPTree(t, "bolt", nil)
	m.mustCLI("add", "--id", "plain")
	m.mustCLI("add", "--id", "gpu1", "--label", "gpu")
	m.mustCLI("add", "--id", "gpu2", "--label", "gpu", "--label", "linux")
	cs := m.inMemory(0)
	one := call[claimJSON](t, cs, "claim", map[string]any{"labels": []string{"linux", "gpu"}})
	if one.Task != "gpu2" {
		t.Errorf("claim with labels linux, gpu took %q, want gpu2", one.Task)
	}
	batch := call[batchJSON](t, cs, "claim_batch", map[string]any{"batch": 5, "labels": []string{"gpu"}})
	if len(batch.Assigned) != 1 || batch.Assigned[0].Task != "gpu1" {
		t.Errorf("batch with label gpu took %+v, want gpu1 alone", batch.Assigned)
	}
	if res := callRaw(t, cs, "claim", map[string]any{"task": "plain", "labels": []string{"gpu"}}); !res.IsError {
		t.Errorf("a named task with labels was not refused: %+v", res.StructuredContent)
	}
	if st := m.mustCLI("show", "plain", "--json"); !strings.Contains(st, `"state":"available"`) {
		t.Errorf("plain after the claims by label:\n%s", st)
	}
}

// An MCP list or log answer is a page of at most maxMCPPage, 0 included:
// one answer of a whole tree of a million tasks was 454 MB (found from
// outside). A negative limit is left for the tree to refuse.
func TestMCP_PagesAreBounded(t *testing.T) {
	for _, c := range []struct {
		asked *int
		want  int
	}{
		{nil, 100}, {ptr(0), maxMCPPage}, {ptr(5), 5}, {ptr(maxMCPPage + 1), maxMCPPage}, {ptr(1 << 30), maxMCPPage}, {ptr(-1), -1},
	} {
		if got := pageLimit(c.asked, 100); got != c.want {
			t.Errorf("pageLimit(%v) = %d, want %d", c.asked, got, c.want)
		}
	}
	m := newMCPTree(t, "bolt", nil)
	for _, id := range []string{"a", "b", "c"} {
		m.mustCLI("add", "--id", id)
	}
	cs := m.inMemory(0)
	if l := call[listJSON](t, cs, "list", map[string]any{"limit": 0}); len(l.Tasks) != 3 || l.More {
		t.Errorf("list limit 0 of 3 tasks: %d tasks, more %v", len(l.Tasks), l.More)
	}
	if l := call[logJSON](t, cs, "log", map[string]any{"limit": 2}); len(l.Events) != 2 || !l.More || l.Events[1].Task != "c" {
		t.Errorf("log limit 2 of 3 events: %+v, want the newest 2 and more", l)
	}
	if l := call[logJSON](t, cs, "log", map[string]any{"limit": 3}); len(l.Events) != 3 || l.More {
		t.Errorf("log limit 3 of 3 events: %d, more %v", len(l.Events), l.More)
	}
}

func ptr(n int) *int { return &n }
