package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

// claimBatch is claim with several ids, --batch N or --partial: one
// transaction, a token per task (fence.ClaimBatch).
func claimBatch(c *cli.Context, out *output, format string) error {
	switch {
	case c.IsSet("token"):
		return usagef("--token restores one claim; it does not go with several tasks, --batch or --partial")
	case c.IsSet("request-id"):
		return usagef("--request-id is for one claim; a batch is repeated safely only by naming its tasks again with their tokens (claim ID --token T)")
	case c.IsSet("batch") && c.NArg() > 0:
		return usagef("--batch N takes the next N ready tasks; it does not go with named tasks %q", c.Args().Slice())
	case c.IsSet("partial") && c.NArg() == 0:
		return usagef("--partial is for named tasks: name them (claim ID ID... --partial)")
	case c.IsSet("batch") && c.Int("batch") < 1:
		return usagef("invalid --batch %d: must be at least 1", c.Int("batch"))
	}
	req := fence.BatchClaimRequest{
		IDs: c.Args().Slice(), Count: c.Int("batch"), Partial: c.Bool("partial"),
		Agent: agentName(c), TTL: c.Duration("ttl"), Wait: c.Duration("wait"), Labels: c.StringSlice("label"),
	}
	return withTree(c, out, func(t *fence.Tree) error {
		var res fence.BatchClaimResult
		err := claimWithReader(c.Context, out, req.Wait, func(ctx context.Context) (err error) {
			res, err = t.ClaimBatch(ctx, req)
			return err
		})
		for _, r := range res.Reaped {
			out.notice(fence.Notice{Kind: fence.NoticeReaped, Name: r.Task, Detail: describeReap(r)})
		}
		if err != nil {
			return err
		}
		return deliver(c.Context, t, out, res.Assigned, func() { printBatch(out, format, res) })
	})
}

// batchJSON is a batch claim's answer: the claims granted (each as claim
// --json prints one) and the named tasks not claimed, each with its
// reason object (as an error of its own would print it).
type batchJSON struct {
	Assigned []*claimJSON  `json:"assigned"`
	Failed   []errorObject `json:"failed"`
	notices
}

func newBatch(res fence.BatchClaimResult) *batchJSON {
	return &batchJSON{Assigned: convert(res.Assigned, newClaim), Failed: batchFailures(res.Failed)}
}

func batchFailures(fs []fence.BatchFailure) []errorObject {
	out := make([]errorObject, 0, len(fs))
	for _, f := range fs {
		obj := classify(f.Err)
		obj.Task = f.ID
		out = append(out, obj)
	}
	return out
}

func printBatch(out *output, format string, res fence.BatchClaimResult) {
	switch format {
	case "json":
		out.writeResult(out.stdout, newBatch(res))
	case "env":
		var ids, tokens, paths []string
		for _, a := range res.Assigned {
			ids = append(ids, a.Task.ID)
			tokens = append(tokens, strconv.FormatUint(a.Token, 10))
			paths = append(paths, a.Path)
		}
		for _, kv := range [][2]string{
			{"FENCE_TASKS", strings.Join(ids, " ")},
			{"FENCE_TOKENS", strings.Join(tokens, " ")},
			{"FENCE_TASK_FILES", strings.Join(paths, " ")},
		} {
			fmt.Fprintf(out.stdout, "%s=%s\n", kv[0], shellQuote(kv[1]))
		}
	default:
		w := out.stdout
		for _, a := range res.Assigned {
			fmt.Fprintf(w, "claimed      %s  token %d  deadline %s (%s)\n", a.Task.ID, a.Token, fmtTime(a.Deadline), fmtLeft(a.Deadline.Sub(now())))
		}
		for _, f := range res.Failed {
			fmt.Fprintf(w, "not claimed  %s: %s\n", f.ID, printable(classify(f.Err).Message))
		}
	}
}
