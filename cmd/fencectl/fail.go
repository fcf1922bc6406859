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
		Description: `If T is the task's current, unexpired token, ends its lease and counts one
attempt; otherwise exit 3 and nothing changes. At max attempts the task goes to
failed/. Below it, the task waits in waiting/ while it backs off (the tree's
retry backoff, 1s unless init or defaults set another, doubled per attempt,
capped, ±20%), and the first write after that moves it to available/; on a tree
whose retry backoff is 0 it goes straight back to available/. fencectl show ID
says where it is and until when.

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
