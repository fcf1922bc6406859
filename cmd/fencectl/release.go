package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func releaseCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "release",
		Usage:     "give a task you hold back, without counting an attempt",
		UsageText: "release ID --token T [--reason R]",
		Description: `Moves the task back to available/ if T is its current, unexpired token;
otherwise exit 3 and nothing changes. No attempt is counted.

   fencectl release build-42 --token "$FENCE_TOKEN" --reason "shutting down"`,
		Flags: fencedFlags(reasonFlag()),
		Action: fencedAction(out, (*fence.Tree).Release, func(w io.Writer, r fence.Result) {
			fmt.Fprintf(w, "%s: released, back in available/\n", r.Task.ID)
		}),
	}
}
