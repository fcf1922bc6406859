package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

func statusCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "counts per state and the live leases",
		UsageText: "status [--watch]",
		Description: `Prints how many tasks are in each state and, for each lease, the task, holder,
token and time left (negative: expired, to be reaped by the next claim).

--watch keeps the table live until interrupted (Ctrl-C: exit 0): on a
terminal it redraws in place, the countdowns every second; elsewhere it
prints the table again after each change, and with --json one status object
per line. It is woken by changes to the journal (inotify, or an etcd
watch), never by a timer; where it cannot watch, it says so and re-reads
every 2s.

   fencectl status --json | jq .counts
   fencectl status --watch
   fencectl status --watch --json | jq -c .counts`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "watch", Usage: "keep the table live: redraw after every change, until interrupted"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("status takes no arguments (got %q); use `fencectl show ID` for one task", c.Args().Slice())
			}
			if c.Bool("watch") {
				return withTree(c, out, func(t *fence.Tree) error { return watchStatus(c.Context, out, t) })
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
		if s == record.Waiting && st.Blocked > 0 {
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
		left := fmtLeft(l.Left)
		if l.Ended != "" {
			left = l.Ended + ": reaped by the next claim"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", l.Task, printable(l.Agent), l.Token, fmtTime(l.Deadline), left)
	}
	tw.Flush()
}

// watchStatus prints the status after every change of the journal: on a
// terminal in place (clear, then the table), the countdowns redrawn every
// second from the last read; elsewhere one table (or JSON object) after
// another.
func watchStatus(ctx context.Context, out *output, t *fence.Tree) error {
	tty := !out.json && isTerminal(out.stdout)
	var last fence.Status
	var readAt time.Time
	draw := func(st fence.Status) {
		if tty {
			fmt.Fprint(out.stdout, "\x1b[H\x1b[2J")
		}
		writeStatus(out.stdout, st)
		if tty {
			fmt.Fprintf(out.stdout, "\nwatching the journal; Ctrl-C stops\n")
		} else {
			fmt.Fprintln(out.stdout)
		}
	}
	redraw := func() {
		st := last
		st.Leases = slices.Clone(last.Leases)
		gone := time.Since(readAt)
		for i := range st.Leases {
			st.Leases[i].Left -= gone
		}
		draw(st)
	}
	var tick time.Duration
	if tty {
		tick = time.Second
	}
	return watchLoop(ctx, t, out, func(ctx context.Context) error {
		st, err := t.Status(ctx)
		if err != nil {
			return err
		}
		if out.json {
			out.writeResult(out.stdout, newStatus(st))
			return nil
		}
		last, readAt = st, time.Now()
		draw(st)
		return nil
	}, tick, redraw)
}
