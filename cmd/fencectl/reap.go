package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func reapCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "reap",
		Usage:     "free expired leases now, explaining each",
		UsageText: "reap [--dry-run]",
		Description: `Every claim reaps first, so no cron job is needed; reap does it on demand and
says, for each lease it frees: task, holder, token, how long ago it expired (or
that the holder, a fencectl run, died), the attempt count and where the task
goes. A reap counts an attempt, as fail does: at max attempts the task goes to
failed/; below it, to waiting/ while it backs off (until the time shown; then
the first write moves it to available/), or straight to available/ on a tree
whose retry backoff is 0.

   fencectl reap --dry-run`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "explain what would be freed; change nothing"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("reap takes no arguments (got %q)", c.Args().Slice())
			}
			return withTree(c, out, func(t *fence.Tree) error {
				rs, err := t.Reap(c.Context, c.Bool("dry-run"))
				if err != nil {
					return err
				}
				out.print(newReap(c.Bool("dry-run"), rs), func(w io.Writer) {
					if len(rs) == 0 {
						fmt.Fprintln(w, "no expired leases")
						return
					}
					if c.Bool("dry-run") {
						fmt.Fprintln(w, "would reap (dry run, nothing changed):")
					}
					writeReaps(w, rs)
				})
				return nil
			})
		},
	}
}
