package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

// The MCP server (`fencectl mcp`) is linked unless the binary is built
// with -tags nomcp: the SDK's package initialisers (net/http, TLS, JSON
// schemas) would cost every short-lived command about a millisecond, so
// `make build` leaves it out of fencectl and fencectl-etcd and makes
// fencectl-mcp, which `fencectl mcp` runs instead (see mcp_server.go).

// serveMCP serves one tree over MCP until the client goes away; nil in a
// binary built without the server.
var serveMCP func(ctx context.Context, s mcpSession) error

// mcpSession is what a server needs: the tree (open for the whole
// session), the agent name claims default to, where notices collect, and
// the protocol's streams (stdout carries only the protocol; logs go to
// stderr).
type mcpSession struct {
	tree    *fence.Tree
	agent   string
	notices *noticeBox
	in      io.Reader
	out     io.Writer
	log     io.Writer
}

// errNoMCP is what a binary built without the server says when no
// fencectl-mcp can take over.
var errNoMCP = errors.New("this fencectl was built without the MCP server (-tags nomcp)")

func mcpCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "mcp",
		Usage:     "serve the tree to AI agents over the Model Context Protocol (stdio)",
		UsageText: "mcp [--agent A]",
		Description: `Serves the tree named by --dir / FENCE_DIR to one MCP client on stdin/stdout
(stdout carries only the protocol; logs go to stderr), until the client closes
stdin. The tools call the same operations as the commands and answer with the
same fields as their --json output: claim, claim_batch, heartbeat, verify,
complete, release, fail, put, status, show, list, log.

A refusal is a tool error (isError) whose structured content is the --json
error object (code, reason, holder, held_since, lost_at, lost_by, ...) plus
"next": the one thing to do about it. A stale token is told who holds the task
and since when, never the holder's token: stop work on that task.

The server never heartbeats for the agent, and a claim outlives the session:
when the client or the server restarts, the lease runs on until its TTL, and
the agent resumes with its token (verify, heartbeat, or claim with token).

Each message is one line of at most 16 MiB. A longer line, or one that is not
a single JSON-RPC 2.0 message (a batch, not JSON), is answered with a JSON-RPC
error of id null and skipped; the session goes on. Write a large output with
` + "`fencectl put`" + `, which streams.

Configure an agent (Claude Code, Cursor, ...; the file and key vary):

   {"mcpServers": {"fencectl": {
      "command": "fencectl",
      "args": ["--dir", "/srv/tasks", "mcp", "--agent", "agent-7"]}}}

   fencectl --dir /srv/tasks mcp --agent agent-7   # what the client runs

--agent (or FENCE_AGENT) names the agent in the journal when a call does not
name one itself; it never authorises anything.`,
		Flags: []cli.Flag{agentFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("mcp takes no arguments (got %q): the tree is --dir / FENCE_DIR, and the client speaks on stdin", c.Args().Slice())
			}
			if serveMCP == nil {
				if !exitsAfterRun {
					return errNoMCP
				}
				return execBeside("fencectl-mcp", errNoMCP)
			}
			box := &noticeBox{}
			t, err := openTreeNotify(c, box.add)
			if err != nil {
				return err
			}
			defer t.Close()
			// Read the journal once before serving: a tree that cannot be
			// read (damaged, newer, locked past --timeout) fails here, with
			// its exit code, rather than at every tool call.
			if _, err := t.Defaults(c.Context); err != nil {
				for _, n := range box.drain() {
					out.notice(n) // with the error, as every command's
				}
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serveMCP(ctx, mcpSession{tree: t, agent: agentName(c), notices: box, in: out.stdin, out: out.rawStdout(), log: out.stderr})
		},
	}
}

// openTreeNotify is openTree for a process that lives on: its notices go
// to notify, not to the output of one command.
func openTreeNotify(c *cli.Context, notify func(fence.Notice)) (*fence.Tree, error) {
	timeout, err := lockTimeout(c)
	if err != nil {
		return nil, err
	}
	return fence.Open(c.String("dir"), fence.Options{Timeout: timeout, Notify: notify, Clock: testClock, Boot: testBoot})
}

// noticeBox collects what the tree noticed until a tool call's answer
// takes it. The tree is shared by the session's calls, so a notice goes
// with the answer of the call that ends next, which is the call that
// caused it unless several run at once.
type noticeBox struct {
	mu      sync.Mutex
	pending []fence.Notice
}

func (b *noticeBox) add(n fence.Notice) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = append(b.pending, n)
}

// take is the pending notices as an answer carries them.
func (b *noticeBox) take() []noticeJSON {
	return newNotices(convert(b.drain(), withHint))
}

func (b *noticeBox) drain() []fence.Notice {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.pending
	b.pending = nil
	return n
}
