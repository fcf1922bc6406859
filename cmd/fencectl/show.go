package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func showCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "one task: record, lease and recent events",
		UsageText: "show ID",
		Description: `   fencectl show build-42
   fencectl show build-42 --json | jq .lease.token`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			id, err := oneArg(c, "task ID")
			if err != nil {
				return err
			}
			return withTree(c, out, func(t *fence.Tree) error {
				v, err := t.Show(c.Context, id)
				if err != nil {
					return err
				}
				out.print(newShow(v), func(w io.Writer) {
					r := v.Task
					fmt.Fprintf(w, "task      %s\nstate     %s\npath      %s\npriority  %d\nattempts  %d of %d\ncreated   %s\n",
						r.ID, r.State, v.Path, r.Priority, r.Attempts, r.MaxAttempts, fmtTime(r.Created))
					if l := r.Lease; l != nil {
						fmt.Fprintf(w, "lease     token %d, agent %s, deadline %s (%s)\n", l.Token, printable(l.Agent), fmtTime(l.Deadline), fmtLeft(l.Deadline.Sub(now())))
					}
					if e := r.Last; e != nil {
						fmt.Fprintf(w, "last      token %d of %s ended by %s at %s\n", e.Token, printable(e.Agent), e.By, fmtTime(e.At))
					}
					fmt.Fprintf(w, "journal   %s: %s\n", v.Journal.Backend, v.Journal.Where)
					fmt.Fprintln(w, "\nrecent events:")
					writeEvents(w, v.Events)
				})
				return nil
			})
		},
	}
}
