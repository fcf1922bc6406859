package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

func logCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "log",
		Usage:     "the audit trail, newest last",
		UsageText: "log [--task ID] [--since T] [--limit N] [--heartbeats]",
		Description: `Every state change is one event: seq, time, type, task, from → to, agent, token,
reason. Heartbeats are hidden unless --heartbeats. With --json, one object per
line.

   fencectl log --task build-42
   fencectl log --since 1h --limit 50
   fencectl log --since 2026-11-21T09:00:00Z --json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "task", Usage: "only this task's events"},
			&cli.StringFlag{Name: "since", Usage: "only events since a time (RFC 3339) or a duration ago (90m)"},
			&cli.IntFlag{Name: "limit", Usage: "only the newest N events (0: all)"},
			&cli.BoolFlag{Name: "heartbeats", Usage: "include heartbeat events"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("log takes no arguments (got %q); use --task ID", c.Args().Slice())
			}
			var since time.Time
			if s := c.String("since"); s != "" {
				var err error
				if since, err = parseSince(s); err != nil {
					return err
				}
			}
			return withTree(c, out, func(t *fence.Tree) error {
				evs, err := t.Log(c.Context, fence.LogFilter{Task: c.String("task"), Since: since, Limit: c.Int("limit"), Heartbeats: c.Bool("heartbeats")})
				if err != nil {
					return err
				}
				if out.json {
					for _, e := range newEvents(evs) {
						out.writeJSON(out.stdout, e)
					}
					return nil
				}
				writeEvents(out.stdout, evs)
				return nil
			})
		},
	}
}

func parseSince(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now().Add(-d), nil
	}
	return time.Time{}, usagef("invalid --since %q: give a time (2026-11-21T09:00:00Z) or a duration ago (90m)", s)
}

func writeEvents(w io.Writer, evs []record.Event) {
	if len(evs) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tEVENT\tTASK\tSTATE\tAGENT\tTOKEN\tREASON")
	for _, e := range evs {
		move := string(e.To)
		if e.From != "" && e.From != e.To {
			move = string(e.From) + "→" + string(e.To)
		}
		tok := "-"
		if e.Token != 0 {
			tok = fmt.Sprint(e.Token)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, fmtTime(e.Time), e.Type, e.Task, move, printable(orDash(e.Agent)), tok, printable(e.Reason))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
