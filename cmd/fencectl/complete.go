package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func completeCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "complete",
		Usage:     "mark a task you hold as done",
		UsageText: "complete ID --token T [--result FILE|-]",
		Description: `Moves the task to done/ if T is its current, unexpired token; otherwise exit 3
and nothing changes. Repeating a complete that succeeded answers success again.
With --result, FILE (or stdin) is stored as out/ID/result in the same locked
step, and only if the token is current.

   fencectl complete build-42 --token "$FENCE_TOKEN"
   ./summarise | fencectl complete build-42 --token "$FENCE_TOKEN" --result -`,
		Flags: fencedFlags(&cli.StringFlag{Name: "result", Usage: "store FILE (or - for stdin) as out/ID/result with the completion"}),
		Action: func(c *cli.Context) error {
			var result io.Reader
			if src := c.String("result"); src != "" {
				r, closeResult, err := openContent(src, out.stdin)
				if err != nil {
					return err
				}
				defer closeResult()
				result = r
			}
			complete := func(t *fence.Tree, ctx context.Context, req fence.FencedRequest) (fence.Result, error) {
				req.Result = result
				return t.Complete(ctx, req)
			}
			return fencedAction(out, complete, func(w io.Writer, r fence.Result) {
				fmt.Fprintf(w, "%s: done\n", r.Task.ID)
			})(c)
		},
	}
}
