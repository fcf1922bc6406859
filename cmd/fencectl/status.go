package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

func statusCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "counts per state and the live leases",
		UsageText: "status",
		Description: `Prints how many tasks are in each state and, for each lease, the task, holder,
token and time left (negative: expired, to be reaped by the next claim).

   fencectl status --json | jq .counts`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("status takes no arguments (got %q); use `fencectl show ID` for one task", c.Args().Slice())
			}
			return withTree(c, out, func(t *fence.Tree) error {
				st, err := t.Status(c.Context)
				if err != nil {
					return err
				}
				out.print(newStatus(st), func(w io.Writer) { writeStatus(w, st) })
				return nil
			})
		},
	}
}

func writeStatus(w io.Writer, st fence.Status) {
	fmt.Fprintf(w, "tree %s (lease %s, max attempts %d)\njournal %s: %s\n\n", st.Root, st.Defaults.TTL, st.Defaults.MaxAttempts, st.Journal.Backend, st.Journal.Where)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tTASKS")
	for _, s := range record.States {
		fmt.Fprintf(tw, "%s\t%d\n", s, st.Counts[s])
		if s == record.Available && st.Blocked > 0 {
			fmt.Fprintf(tw, "  blocked\t%d\n", st.Blocked)
		}
	}
	tw.Flush()
	if len(st.Leases) == 0 {
		fmt.Fprintln(w, "\nno leases")
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tAGENT\tTOKEN\tDEADLINE\tLEFT")
	for _, l := range st.Leases {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", l.Task, printable(l.Agent), l.Token, fmtTime(l.Deadline), fmtLeft(l.Left))
	}
	tw.Flush()
}
