package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func setCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "set",
		Usage:     "change the priority, labels or dependencies of a task nobody holds (operator)",
		UsageText: "set ID [--priority N] [--label L]... [--after ID[,ID...]]...",
		Description: `Changes what may change of an available (or blocked) task, in one logged
event (set) that carries its new priority, labels and dependencies; the
claim order and the indexes follow in the same commit. What is not given
stays: --label and --after replace the whole list (--label '' or --after ''
is refused: give --clear-labels / --clear-after to empty one). A dependency
already done is not waited for; one that would close a cycle (it waits,
perhaps through others, for this task) exits 2; an unknown one exits 6.
A claimed task exits 4 (release it, or revoke the lease, first), as does a
done or failed one (requeue it first). Nothing to change: exit 0, "retry".

   fencectl set deploy --priority 10
   fencectl set deploy --after build-42,test-42
   fencectl set train-3 --label gpu --label linux
   fencectl set deploy --clear-after`,
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "priority", Usage: "the new priority (higher is claimed first)"},
			&cli.StringSliceFlag{Name: "label", Usage: "the new labels (repeatable): replace the old ones"},
			&cli.StringSliceFlag{Name: "after", Usage: "the new dependencies (repeatable; comma-separated): replace the old ones"},
			&cli.BoolFlag{Name: "clear-labels", Usage: "remove every label"},
			&cli.BoolFlag{Name: "clear-after", Usage: "wait for nothing: the task is ready"},
			agentFlag(), jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			id, err := oneArg(c, "task ID")
			if err != nil {
				return err
			}
			req := fence.SetRequest{ID: id, Agent: agentName(c)}
			if c.IsSet("priority") {
				p := c.Int64("priority")
				req.Priority = &p
			}
			for _, pair := range [][2]string{{"label", "clear-labels"}, {"after", "clear-after"}} {
				if c.IsSet(pair[0]) && c.Bool(pair[1]) {
					return usagef("--%s and --%s contradict each other: give one", pair[0], pair[1])
				}
			}
			switch {
			case c.IsSet("label"):
				req.Labels = c.StringSlice("label")
			case c.Bool("clear-labels"):
				req.Labels = []string{}
			}
			switch {
			case c.IsSet("after"):
				req.After = c.StringSlice("after")
			case c.Bool("clear-after"):
				req.After = []string{}
			}
			if req.Priority == nil && req.Labels == nil && req.After == nil {
				return usagef("set needs something to change: --priority N, --label L, --after ID, --clear-labels or --clear-after")
			}
			return withTree(c, out, func(t *fence.Tree) error {
				res, err := t.Set(c.Context, req)
				if err != nil {
					return err
				}
				out.print(newSet(res), func(w io.Writer) {
					if res.Retry {
						fmt.Fprintf(w, "%s: nothing to change\n", id)
						return
					}
					r := res.Task
					fmt.Fprintf(w, "%s: priority %d, labels [%s], after [%s]", id, r.Priority, strings.Join(r.Labels, " "), strings.Join(r.After, " "))
					if r.Blocked() {
						fmt.Fprint(w, " (blocked)")
					}
					fmt.Fprintln(w)
				})
				return nil
			})
		},
	}
}
