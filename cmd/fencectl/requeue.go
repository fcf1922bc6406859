package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func requeueCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "requeue",
		Usage:     "bring a done or failed task back to available/, attempts reset (operator)",
		UsageText: "requeue ID [--reason R]",
		Description: `Moves a done or failed task back to available/ with its attempts reset and no
backoff. A task that still waits for a dependency not done yet (one cancelled
while it was blocked) goes to waiting/ instead, and to available/ once its
dependencies are done. Any other task is refused (exit 4).

   fencectl requeue build-42 --reason "flaky runner fixed"`,
		Flags: []cli.Flag{agentFlag(), reasonFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			id, err := oneArg(c, "task ID")
			if err != nil {
				return err
			}
			return withTree(c, out, func(t *fence.Tree) error {
				res, err := t.Requeue(c.Context, id, agentName(c), c.String("reason"))
				if err != nil {
					return err
				}
				out.print(newTask(res.Task, res.Path), func(w io.Writer) {
					fmt.Fprintf(w, "%s: requeued from %s/ to %s/, attempts reset\n", id, res.Event.From, res.Task.State)
				})
				return nil
			})
		},
	}
}
