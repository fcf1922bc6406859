package main

import (
	"fmt"
	"io"
	"strings"

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
		Flags: []cli.Flag{jsonFlag()},
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
					if len(r.Labels) > 0 {
						fmt.Fprintf(w, "labels    %s\n", strings.Join(r.Labels, ", "))
					}
					if wait, ok := fence.WaitOf(r); ok {
						fmt.Fprintf(w, "waiting   %s\n", wait)
					}
					if len(v.WaitsFor) > 0 {
						what := "after    "
						if r.Blocked() {
							what = "blocked  "
						}
						fmt.Fprintf(w, "%s waits for %s\n", what, describeDeps(v.WaitsFor))
					}
					if l := r.Lease; l != nil {
						fmt.Fprintf(w, "lease     token %d, agent %s, deadline %s (%s)\n", l.Token, printable(l.Agent), fmtTime(l.Deadline), fmtLeft(l.Deadline.Sub(now())))
					}
					if e := r.Last; e != nil {
						fmt.Fprintf(w, "last      token %d of %s ended by %s at %s\n", e.Token, printable(e.Agent), e.By, fmtTime(e.At))
					}
					fmt.Fprintf(w, "journal   %s: %s\n", v.Journal.Backend, v.Journal.Where)
					if v.FoldedTo != 0 {
						fmt.Fprintf(w, "history   folded by compact: events up to seq %d are in the record, not the log\n", v.FoldedTo)
					}
					fmt.Fprintln(w, "\nrecent events:")
					writeEvents(w, v.Events)
				})
				return nil
			})
		},
	}
}

// describeDeps words what a task waits for: "a (claimed), b (failed:
// cancelled)": a failed dependency keeps it blocked until requeued and done.
func describeDeps(deps []fence.Dependency) string {
	parts := make([]string, 0, len(deps))
	for _, d := range deps {
		s := fmt.Sprintf("%s (%s", d.ID, d.State)
		if d.Why != "" {
			s += ": " + printable(d.Why) + "; requeue it to go on"
		}
		parts = append(parts, s+")")
	}
	return strings.Join(parts, ", ")
}
