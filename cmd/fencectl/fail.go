package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func failCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "fail",
		Usage:     "give up on a task you hold, counting one attempt",
		UsageText: "fail ID --token T [--reason R]",
		Description: `Counts one attempt and moves the task back to available/, or to failed/ once it
reached max attempts, if T is its current, unexpired token; otherwise exit 3
and nothing changes.

   fencectl fail build-42 --token "$FENCE_TOKEN" --reason "exit status 2"`,
		Flags: fencedFlags(reasonFlag()),
		Action: fencedAction(out, (*fence.Tree).Fail, func(w io.Writer, r fence.Result) {
			fmt.Fprintf(w, "%s: attempt %d of %d failed; task is in %s/", r.Task.ID, r.Task.Attempts, r.Task.MaxAttempts, r.Task.State)
			if wait, ok := fence.WaitOf(r.Task); ok {
				fmt.Fprintf(w, ", %s", wait)
			}
			fmt.Fprintln(w)
		}),
	}
}
