package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func compactCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "compact",
		Usage:     "fold the events of finished tasks into their records; shrink the journal",
		UsageText: "compact [--before D] [--dry-run]",
		Description: `Every event is kept until compact folds it. compact takes the tasks that
finished (done or failed) at least D ago (--before, default 0: every finished
task), keeps each one's final record as the start of its history, and drops
its events and claim records. status, list, show, dependencies (add --after a
folded task), replay and replay --check read the same state as before; show
says how much of a task's history was folded, and log has a "compacted" event
for each commit of it. A requeued folded task goes on from its record.
Sequence numbers and tokens are never reused: the next event and the next
claim get higher ones than any before. A token of a folded task is still
refused (exit 3): its last one as stale, with how its lease ended.

On bbolt compact then rewrites .fence/journal.db into a new file holding only
what is live (bbolt never shrinks a file), syncs it and renames it over the
journal, holding the writer's turn throughout: a crash leaves the old journal
or the new one. On etcd the keys are deleted; etcd gives the space back with
its own compaction and defrag (etcdctl compact, etcdctl defrag).

--dry-run counts what would be folded and changes nothing. Progress goes to
stderr on a terminal.

   fencectl compact --dry-run
   fencectl compact --before 168h
   fencectl compact --before 7d --json | jq .bytes_after`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "before", Value: "0", Usage: "fold only tasks finished at least this long ago (90m, 24h, 7d; 0: all)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "count what would be folded; change nothing"},
			agentFlag(),
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("compact takes no arguments (got %q)", c.Args().Slice())
			}
			before, err := parseAge(c.String("before"))
			if err != nil {
				return err
			}
			req := fence.CompactRequest{Before: before, DryRun: c.Bool("dry-run"), Agent: agentName(c)}
			if !out.json && isTerminal(out.stderr) {
				req.Progress = func(done, total int) {
					fmt.Fprintf(out.stderr, "\rcompact: folded %d of %d tasks", done, total)
					if done == total {
						fmt.Fprintln(out.stderr)
					}
				}
			}
			return withTree(c, out, func(t *fence.Tree) error {
				rep, err := t.Compact(c.Context, req)
				if err != nil {
					return err
				}
				out.print(newCompact(rep), func(w io.Writer) { writeCompact(w, rep) })
				return nil
			})
		},
	}
}

// parseAge reads --before: a Go duration (90m, 24h) or a number of days
// (7d).
func parseAge(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil && d < 0 {
		return 0, usagef("invalid --before %q: it must not be negative; give how long ago a task must have finished (24h, 7d; 0: every finished task)", s)
	}
	if d, ok := durationAgo(s); ok {
		return d, nil
	}
	return 0, usagef("invalid --before %q: give how long ago a task must have finished, as a duration (90m, 24h) or days (7d); 0: every finished task", s)
}

// durationAgo reads how long ago, as --before and log's --since take it:
// a Go duration (90m, 24h), or a number of days (7d), never negative.
func durationAgo(s string) (time.Duration, bool) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, d >= 0
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.ParseUint(n, 10, 16); err == nil {
			return time.Duration(days) * 24 * time.Hour, true
		}
	}
	return 0, false
}

func writeCompact(w io.Writer, rep fence.CompactReport) {
	cutoff := fmtTime(rep.Cutoff)
	if rep.DryRun {
		fmt.Fprintf(w, "would fold %d finished task(s) (finished at or before %s): %d event(s); dry run, nothing changed\n", rep.Tasks, cutoff, rep.Events)
		return
	}
	fmt.Fprintf(w, "folded %d finished task(s) (finished at or before %s): %d event(s) and %d claim record(s) dropped", rep.Tasks, cutoff, rep.Events, rep.Claims)
	if rep.Events > 0 {
		fmt.Fprintf(w, ", seq %d-%d", rep.FirstSeq, rep.LastSeq)
	}
	fmt.Fprintln(w)
	if rep.Reclaimed {
		fmt.Fprintf(w, "journal rewritten: %s -> %s\n", fmtBytes(rep.BytesBefore), fmtBytes(rep.BytesAfter))
	} else {
		fmt.Fprintln(w, "the store gives the space back itself (etcd: etcdctl compact, then etcdctl defrag)")
	}
}

func fmtBytes(n int64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 10<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// compactJSON is compact's answer.
type compactJSON struct {
	BytesAfter  int64     `json:"bytes_after"`
	BytesBefore int64     `json:"bytes_before"`
	Claims      int       `json:"claims"`
	Cutoff      time.Time `json:"cutoff"`
	DryRun      bool      `json:"dry_run"`
	Events      int       `json:"events"`
	FirstSeq    uint64    `json:"first_seq"`
	LastSeq     uint64    `json:"last_seq"`
	notices
	Reclaimed bool `json:"reclaimed"`
	Tasks     int  `json:"tasks"`
}

func newCompact(r fence.CompactReport) *compactJSON {
	return &compactJSON{
		BytesAfter: r.BytesAfter, BytesBefore: r.BytesBefore, Claims: r.Claims, Cutoff: r.Cutoff.UTC(), DryRun: r.DryRun,
		Events: r.Events, FirstSeq: r.FirstSeq, LastSeq: r.LastSeq, Reclaimed: r.Reclaimed, Tasks: r.Tasks,
	}
}
