package main

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func addCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "add",
		Usage:     "add a task (content from FILE or stdin)",
		UsageText: "add [--id ID] [--priority N] [--max-attempts N] [--after ID[,ID...]]... [--label L]... [--not-before TIME | --delay D] [FILE|-]",
		Description: `Writes the content to .fence/tmp, fsyncs it, journals the task and renames it
into available/. Prints the task id. With no FILE the task is empty; "-" reads
stdin. The id defaults to a new ULID.

--after names tasks that must be done first (repeat it, or separate ids by
commas): until they are, the task is blocked: it waits in waiting/ and no
claim takes it, and it moves to available/ in the same commit that completes
the last of them. A task already done is not waited for; an unknown one
exits 6.
--not-before TIME (RFC 3339, e.g. 2030-01-02T15:04:05Z) or --delay D (e.g.
90s, 2h) schedules the task: it waits in waiting/ until then, and the first
command that writes the tree at or after that time (any claim) moves it to
available/; claim --wait wakes for it. With --after too, it waits for both.
--label tags the task (repeatable); claim --label takes only tasks that
carry every label asked for. Labels follow the id rule.

   fencectl add --id build-42 --priority 5 spec.txt
   echo "resize img-7" | fencectl add -
   fencectl add --id deploy --after build-42,test-42 --label prod deploy.sh
   fencectl add --id train-3 --label gpu --label linux job.yaml
   fencectl add --id nightly --not-before 2030-01-02T02:00:00Z report.sh
   fencectl add --id retry-later --delay 15m job.yaml`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Usage: "task id [A-Za-z0-9][A-Za-z0-9._-]{0,127} (default: a new ULID)"},
			&cli.Int64Flag{Name: "priority", Usage: "higher is claimed first"},
			&cli.IntFlag{Name: "max-attempts", Usage: "attempts before failed/ (default: the tree's)"},
			&cli.StringSliceFlag{Name: "after", Usage: "task ids that must be done first (repeatable; comma-separated)"},
			&cli.StringSliceFlag{Name: "label", Usage: "a label for claim --label (repeatable)"},
			&cli.StringFlag{Name: "not-before", Usage: "no claim before this time (RFC 3339): it waits in waiting/"},
			&cli.DurationFlag{Name: "delay", Usage: "no claim before this long from now: it waits in waiting/"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			src, err := optionalArg(c)
			if err != nil {
				return err
			}
			// 0 is how AddRequest says "not given"; fence checks the rest.
			if c.IsSet("max-attempts") && c.Int("max-attempts") == 0 {
				return usagef("invalid --max-attempts 0: must be at least 1")
			}
			var notBefore time.Time
			if v := c.String("not-before"); c.IsSet("not-before") {
				t, err := time.Parse(time.RFC3339Nano, v)
				if err != nil {
					return usagef("invalid --not-before %q: give a time in RFC 3339, e.g. 2030-01-02T15:04:05Z (or --delay 10m)", v)
				}
				// The zero time (0001-01-01T00:00:00Z) is how AddRequest
				// says "not given": refuse it here rather than add a task
				// due at once, as fence refuses every other time out of
				// its range.
				if t.Year() < 1970 || t.Year() > 2200 {
					return usagef("invalid --not-before %q: must be a time between 1970 and 2200", v)
				}
				notBefore = t
			}
			var content io.Reader
			if src != "" {
				r, closeContent, err := openContent(src, out.stdin)
				if err != nil {
					return err
				}
				defer closeContent()
				content = r
			}
			return withTree(c, out, func(t *fence.Tree) error {
				res, err := t.Add(c.Context, fence.AddRequest{
					ID: c.String("id"), Priority: c.Int64("priority"), MaxAttempts: c.Int("max-attempts"), Content: content,
					After: c.StringSlice("after"), Labels: c.StringSlice("label"),
					NotBefore: notBefore, Delay: c.Duration("delay"),
				})
				if err != nil {
					return err
				}
				out.print(newTask(res.Task, res.Path), func(w io.Writer) { fmt.Fprintln(w, res.Task.ID) })
				return nil
			})
		},
	}
}
