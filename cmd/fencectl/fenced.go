package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

// fencedFlags are the flags every token-checked command takes.
func fencedFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{tokenFlag(), agentFlag(), jsonFlag()}, extra...)
}

// fencedRequest reads ID, --token, --agent and (where defined) --reason
// and --ttl.
func fencedRequest(c *cli.Context) (fence.FencedRequest, error) {
	id, err := oneArg(c, "task ID")
	if err != nil {
		return fence.FencedRequest{}, err
	}
	if err := fence.ValidateID(id); err != nil {
		return fence.FencedRequest{}, err
	}
	tok, err := requireToken(c)
	if err != nil {
		return fence.FencedRequest{}, err
	}
	return fence.FencedRequest{ID: id, Token: tok, Agent: c.String("agent"), Reason: c.String("reason"), TTL: c.Duration("ttl")}, nil
}

// doneBy is what a command that ends a lease did, for the answer to its
// retry.
var doneBy = map[string]string{"complete": "completed", "release": "released", "fail": "failed"}

// fencedAction runs one token-checked mutation and prints its result.
func fencedAction(out *output, op func(*fence.Tree, context.Context, fence.FencedRequest) (fence.Result, error), text func(io.Writer, fence.Result)) cli.ActionFunc {
	return func(c *cli.Context) error {
		req, err := fencedRequest(c)
		if err != nil {
			return err
		}
		return withTree(c, out, func(t *fence.Tree) error {
			res, err := op(t, c.Context, req)
			if err != nil {
				return err
			}
			out.print(fencedAnswer(res, req.Token), func(w io.Writer) {
				if res.MovedOn {
					fmt.Fprintf(w, "%s: this token had already %s it; the task has changed since (it is in %s/ now)\n", res.Task.ID, doneBy[c.Command.Name], res.Task.State)
				} else {
					text(w, res)
				}
				if res.Retry {
					fmt.Fprintln(w, "(a retry: this token had already done that; nothing changed)")
				}
			})
			return nil
		})
	}
}
