package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func completeCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "complete",
		Usage:     "mark a task you hold as done",
		UsageText: "complete ID --token T",
		Description: `Moves the task to done/ if T is its current, unexpired token; otherwise exit 3
and nothing changes. Repeating a complete that succeeded answers success again.

   fencectl complete build-42 --token "$FENCE_TOKEN"`,
		Flags: fencedFlags(),
		Action: fencedAction(out, (*fence.Tree).Complete, func(w io.Writer, r fence.Result) {
			fmt.Fprintf(w, "%s: done\n", r.Task.ID)
		}),
	}
}
