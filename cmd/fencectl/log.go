package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

func logCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "log",
		Usage:     "the audit trail, newest last",
		UsageText: "log [--task ID] [--since T] [--limit N] [--heartbeats] [--follow]",
		Description: `Every state change is one event: seq, time, type, task, from → to, agent, token,
reason. Heartbeats are hidden unless --heartbeats. With --json, one object per
line.

--follow prints the events as they are committed, after the ones selected
(--since, --limit choose where it starts), until interrupted (Ctrl-C: exit
0). It waits on the journal (inotify, or an etcd watch), never on a timer;
where it cannot watch, it says so and re-reads every 2s.

   fencectl log --task build-42
   fencectl log --since 1h --limit 50
   fencectl log --since 2026-11-21T09:00:00Z --json
   fencectl log --follow --limit 10
   fencectl log --follow --task build-42 --json | jq -c 'select(.type == "complete")'`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "task", Usage: "only this task's events"},
			&cli.StringFlag{Name: "since", Usage: "only events since a time (RFC 3339) or how long ago (90m, 24h, 7d)"},
			&cli.IntFlag{Name: "limit", Usage: "only the newest N events (0: all)"},
			&cli.BoolFlag{Name: "heartbeats", Usage: "include heartbeat events"},
			&cli.BoolFlag{Name: "follow", Usage: "keep printing events as they are committed, until interrupted"},
			jsonFlag(),
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
			f := fence.LogFilter{Task: c.String("task"), Since: since, Limit: c.Int("limit"), Heartbeats: c.Bool("heartbeats")}
			if c.Bool("follow") {
				return withTree(c, out, func(t *fence.Tree) error { return followLog(c.Context, out, t, f) })
			}
			return withTree(c, out, func(t *fence.Tree) error {
				evs, err := t.Log(c.Context, f)
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
	if d, ok := durationAgo(s); ok {
		return now().Add(-d), nil
	}
	return time.Time{}, usagef("invalid --since %q: give a time (2026-11-21T09:00:00Z) or how long ago (90m, 24h, 7d)", s)
}

// followPage bounds the events log --follow reads at once.
const followPage = 1000

// followLog prints the events f selects, then every event committed
// after them that f's task and heartbeats select, as it comes.
func followLog(ctx context.Context, out *output, t *fence.Tree, f fence.LogFilter) error {
	var cursor uint64
	started := false
	print := func(evs []record.Event) {
		if out.json {
			for _, e := range newEvents(evs) {
				out.writeJSON(out.stdout, e)
			}
			return
		}
		writeEventRows(out.stdout, evs, false, true)
	}
	return watchLoop(ctx, t, out, func(ctx context.Context) error {
		if !started {
			// The head first: what is committed after it comes through
			// the watch, never twice.
			head, err := t.LastSeq(ctx)
			if err != nil {
				return err
			}
			evs, err := t.Log(ctx, f)
			if err != nil {
				return err
			}
			for len(evs) > 0 && evs[len(evs)-1].Seq > head {
				evs = evs[:len(evs)-1]
			}
			if !out.json {
				writeEventRows(out.stdout, nil, true, true)
			}
			print(evs)
			started, cursor = true, head
			return nil
		}
		for {
			p, err := t.EventsAfter(ctx, cursor, followPage, f.Heartbeats)
			if err != nil {
				return err
			}
			evs := p.Events[:0:0]
			for _, e := range p.Events {
				if f.Task == "" || e.Task == f.Task {
					evs = append(evs, e)
				}
			}
			print(evs)
			if p.Last == cursor {
				return nil
			}
			cursor = p.Last
		}
	}, 0, nil)
}

func writeEvents(w io.Writer, evs []record.Event) {
	if len(evs) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	writeEventRows(w, evs, true, false)
}

// writeEventRows writes evs as a table, with its header if asked; with
// pad, columns have fixed minimum widths, so that rows written by separate
// calls (log --follow) line up with the header.
func writeEventRows(w io.Writer, evs []record.Event, header, pad bool) {
	row := func(cols ...string) string {
		if pad {
			return followRow(cols...)
		}
		return strings.Join(cols, "\t")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, row("SEQ", "TIME", "EVENT", "TASK", "STATE", "AGENT", "TOKEN", "REASON"))
	}
	for _, e := range evs {
		move := string(e.To)
		if e.From != "" && e.From != e.To {
			move = string(e.From) + "→" + string(e.To)
		}
		tok := "-"
		if e.Token != 0 {
			tok = fmt.Sprint(e.Token)
		}
		fmt.Fprintln(tw, row(fmt.Sprint(e.Seq), fmtTime(e.Time), string(e.Type), e.Task, move, printable(orDash(e.Agent)), tok, printable(e.Reason)))
	}
	tw.Flush()
}

// followRow pads the columns of an event row to fixed minimum widths, so
// that rows printed apart line up; tabwriter widens a column beyond them
// within one call.
func followRow(cols ...string) string {
	widths := []int{5, 20, 9, 12, 20, 12, 16, 0}
	for i, c := range cols {
		if n := utf8.RuneCountInString(c); i < len(cols)-1 && n < widths[i] {
			cols[i] = c + strings.Repeat(" ", widths[i]-n)
		}
	}
	return strings.Join(cols, "\t")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
