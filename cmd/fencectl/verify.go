package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func verifyCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "check that your token still holds a task (changes nothing)",
		UsageText: "verify ID --token T",
		Description: `Exit 0 only if T is the task's current, unexpired token; exit 3 with how it was
lost otherwise. The check to run before a side effect outside the tree.

   fencectl verify build-42 --token "$FENCE_TOKEN" && deploy`,
		Flags: fencedFlags(),
		Action: func(c *cli.Context) error {
			req, err := fencedRequest(c)
			if err != nil {
				return err
			}
			return withTree(c, out, func(t *fence.Tree) error {
				rec, err := t.Verify(c.Context, req)
				if err != nil {
					return err
				}
				// The fenced commands' shape (fencedJSON); verify changes
				// nothing, so no event, and says so with current: true.
				j := newFenced(rec, t.Path(rec.ID, rec.State), req.Token, false, nil)
				j.Current = true
				out.print(j, func(w io.Writer) {
					fmt.Fprintf(w, "%s: token %d is current; lease ends %s (%s)\n", rec.ID, req.Token, fmtTime(rec.Lease.Deadline), fmtLeft(rec.Lease.Deadline.Sub(now())))
				})
				return nil
			})
		},
	}
}
