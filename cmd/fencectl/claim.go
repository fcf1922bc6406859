package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/cmd/internal/daemonlink"
	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

func claimCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "claim",
		Usage:     "claim the named task or the next ready one; prints its token",
		UsageText: "claim [ID...] [--agent A] [--ttl D] [--wait D] [--token T] [--request-id K] [--batch N] [--partial] [--label L]... [--format text|json|env]",
		Description: `Reaps expired leases first, then claims the named task or the highest-priority,
oldest available one, issues a new fencing token and moves the file to claimed/.
Keep the token: every later step on the task must show it.

With --token T it restores a claim instead (an agent back from a restart with
an old note): the same token back with the lease renewed if T is still
current, else exit 3 with how T was lost. FENCE_TOKEN is never read here.

A claim is made only for a reader: if stdout has no reader (a closed pipe),
nothing is claimed and claim exits 141; with --wait it stops waiting as soon
as its reader leaves.

   fencectl claim --agent a1
   fencectl claim build-42 --agent a1 --ttl 30m
   # sets FENCE_TASK, FENCE_TOKEN, FENCE_TASK_FILE, FENCE_DEADLINE; check the
   # exit code first (eval of nothing succeeds):
   env=$(fencectl claim --agent a1 --wait 1m --format env) && eval "$env"
   fencectl claim build-42 --token 1795000000000123              # restore
   fencectl claim --token 1795000000000123                       # restore: the token finds its task
   fencectl claim --agent a1 --request-id a1-run-7               # repeatable: same claim while current

With --request-id K, a claim already granted to request K of the same agent
(request ids are scoped by agent name) and still current is returned again,
lease renewed, instead of claiming another task: an agent that writes K down
before claiming can always recover a claim whose answer it never read.

Batches: several tasks in one step, each with its own token, all committed
together. Name them (all or nothing: if one cannot be claimed, none is, exit 4
with a reason per task; with --partial, those that can be are claimed and the
rest reported), or take the next N ready ones with --batch N (up to N, in claim
order; exit 4 if none is ready). --format env then sets FENCE_TASKS,
FENCE_TOKENS and FENCE_TASK_FILES, space-separated, in the same order.

   fencectl claim fetch build-1 build-2 --agent a1               # all three or none
   fencectl claim fetch build-1 build-2 --agent a1 --partial --json
   fencectl claim --batch 10 --agent a1 --json                   # up to 10 ready tasks

Labels: --label L (repeatable) takes only a ready task that carries every
label asked for, in claim order; with --batch N up to N such tasks, with
--wait until one is ready. It walks the ready index of the first label and
checks the others on each candidate, so name the rarest label first. Not
with a task ID (or --token).

   fencectl claim --agent gpu-1 --label gpu --label linux
   fencectl claim --agent gpu-1 --label gpu --batch 4 --wait 1m

Exit 4 when nothing is ready (or the named task is not available).`,
		Flags: []cli.Flag{
			agentFlag(),
			&cli.DurationFlag{Name: "ttl", EnvVars: []string{"FENCE_TTL"}, Usage: "lease length (default: the tree's)"},
			&cli.DurationFlag{Name: "wait", Usage: "keep trying this long while nothing is ready"},
			&cli.GenericFlag{Name: "token", Value: tokenValue(), Usage: "restore: renew this claim if its token is still current"},
			&cli.StringFlag{Name: "request-id", Usage: "idempotency key: the same agent repeating it gets the same claim back while it is current"},
			&cli.IntFlag{Name: "batch", Usage: "claim up to N ready tasks at once, each with its own token"},
			&cli.BoolFlag{Name: "partial", Usage: "with several named tasks: claim those that can be, report the rest"},
			&cli.StringSliceFlag{Name: "label", Usage: "only a ready task with this label (repeatable: all of them; the rarest first)"},
			&cli.StringFlag{Name: "format", Value: "text", Usage: "text, json or env (NAME='value' lines for eval)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			switch format {
			case "text", "env":
				if out.json && c.IsSet("format") {
					return usagef("--format %s and --json contradict each other: give one (--json is --format json)", format)
				}
			case "json":
				out.json = true
			default:
				return usagef("invalid --format %q: use text, json or env", format)
			}
			if out.json {
				format = "json"
			}
			if c.IsSet("token") && (c.IsSet("request-id") || c.IsSet("wait")) {
				return usagef("--token restores a claim you hold; --request-id and --wait are for a new claim: give one or the other")
			}
			if v := os.Getenv(daemonlink.UndeliveredVar); v != "" && out.served == nil {
				return undoUndelivered(c, out, v)
			}
			if c.NArg() > 1 || c.IsSet("batch") || c.IsSet("partial") {
				return claimBatch(c, out, format)
			}
			id, err := optionalArg(c)
			if err != nil {
				return err
			}
			return withTree(c, out, func(t *fence.Tree) error {
				var res fence.ClaimResult
				err := claimWithReader(c.Context, out, c.Duration("wait"), func(ctx context.Context) (err error) {
					res, err = t.Claim(ctx, fence.ClaimRequest{
						ID: id, Agent: agentName(c), TTL: c.Duration("ttl"), Wait: c.Duration("wait"), Token: c.Uint64("token"),
						RequestID: c.String("request-id"), Labels: c.StringSlice("label"),
					})
					return err
				})
				for _, r := range res.Reaped {
					out.notice(fence.Notice{Kind: fence.NoticeReaped, Name: r.Task, Detail: describeReap(r)})
				}
				if err != nil {
					return err
				}
				return deliver(c.Context, t, out, []fence.ClaimResult{res}, func() { printClaim(out, format, res) })
			})
		},
	}
}

// deliver prints claims (print) and undoes them if the answer could not
// be written (stdout closed, a full disk behind a redirect: ENOSPC, EIO):
// nobody could read their tokens, and the tasks would stay held until
// their leases ran out, then be reaped as failed attempts. A reader that
// has gone (EPIPE) is claim_reader.go's: nothing is claimed then.
func deliver(ctx context.Context, t *fence.Tree, out *output, claims []fence.ClaimResult, print func()) error {
	if out.served != nil {
		// The client writes the answer: it hands the claims back to be
		// undone if it cannot (daemonlink.UndeliveredVar).
		var undo strings.Builder
		for _, c := range claims {
			if !c.Renewed {
				fmt.Fprintf(&undo, "%s %d\n", c.Task.ID, c.Token)
			}
		}
		out.served.undo = undo.String()
		print()
		return nil
	}
	w := &errWriter{w: out.stdout}
	was := out.stdout
	out.stdout = w
	print()
	out.stdout = was
	if w.err == nil {
		return nil
	}
	why := fmt.Errorf("its answer could not be written to stdout (%w)", w.err)
	var undone []error // each claim named: a batch's answer is all of them
	for _, c := range claims {
		if c.Renewed {
			continue // the claim was held before; its holder has the token
		}
		undone = append(undone, t.UndoClaim(ctx, c, why))
	}
	if len(undone) == 0 {
		return why
	}
	return errors.Join(undone...)
}

// undoUndelivered releases the claims a daemon made whose answer its
// client could not write (daemonlink.UndeliveredVar: the write's error,
// then one "ID TOKEN" per line), and reports that error. It claims
// nothing.
func undoUndelivered(c *cli.Context, out *output, v string) error {
	writeErr, lines, _ := strings.Cut(v, "\n")
	why := fmt.Errorf("its answer could not be written to stdout (%s)", writeErr)
	return withTree(c, out, func(t *fence.Tree) error {
		var first error
		for _, line := range strings.Split(strings.TrimSpace(lines), "\n") {
			id, tok, _ := strings.Cut(line, " ")
			token, err := strconv.ParseUint(tok, 10, 64)
			if err != nil || id == "" {
				continue
			}
			cr := fence.ClaimResult{Task: record.Task{ID: id}, Token: token, Agent: agentName(c)}
			if err := t.UndoClaim(c.Context, cr, why); first == nil {
				first = err
			}
		}
		if first == nil {
			return why
		}
		return first
	})
}

// errWriter keeps the first error of the writes to w.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

func printClaim(out *output, format string, res fence.ClaimResult) {
	switch format {
	case "json":
		out.writeResult(out.stdout, newClaim(res))
	case "env":
		for _, kv := range [][2]string{
			{"FENCE_TASK", res.Task.ID},
			{"FENCE_TOKEN", strconv.FormatUint(res.Token, 10)},
			{"FENCE_TASK_FILE", res.Path},
			{"FENCE_DEADLINE", fmtTime(res.Deadline)},
		} {
			fmt.Fprintf(out.stdout, "%s=%s\n", kv[0], shellQuote(kv[1]))
		}
	default:
		w := out.stdout
		verb := "claimed"
		if res.Renewed {
			verb = "renewed"
		}
		fmt.Fprintf(w, "%s  %s\ntoken    %d\nagent    %s\npath     %s\ndeadline %s (%s)\n",
			verb, res.Task.ID, res.Token, res.Agent, res.Path, fmtTime(res.Deadline), fmtLeft(res.Deadline.Sub(now())))
	}
}

// shellQuote quotes s for POSIX shells: eval of NAME='…' sets exactly s.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func describeReap(r fence.Reaped) string {
	to := fmt.Sprintf("task goes to %s/", r.To)
	if !r.Until.IsZero() {
		to += ", backing off until " + fmtTime(r.Until)
	}
	if r.Reason == fence.ReasonDiedUnstarted {
		return fmt.Sprintf("the process of %s (token %d) died before it started the task; released, no attempt counted (%d of %d used); %s",
			r.Holder, r.Token, r.Attempts, r.MaxAttempts, to)
	}
	if r.Reason == fence.ReasonHolderDied {
		return fmt.Sprintf("the process of %s (token %d) died; attempt %d of %d; %s",
			r.Holder, r.Token, r.Attempts, r.MaxAttempts, to)
	}
	return fmt.Sprintf("lease of %s (token %d) expired %s ago; attempt %d of %d; %s",
		r.Holder, r.Token, r.ExpiredFor.Round(time.Second), r.Attempts, r.MaxAttempts, to)
}

// writeReaps prints reap explanations, one per line.
func writeReaps(w io.Writer, rs []fence.Reaped) {
	for _, r := range rs {
		fmt.Fprintf(w, "%s: %s\n", r.Task, describeReap(r))
	}
}
