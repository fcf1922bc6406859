package main

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func initCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "create a task tree and its journal (idempotent)",
		UsageText: "init [--ttl 10m] [--max-attempts 3]",
		Description: `Creates the root if missing, inbox/ available/ claimed/ done/ failed/ out/ and
.fence/ with the journal. On an existing tree it checks the journal and changes
nothing. The settings become the tree's defaults.

   fencectl --dir /srv/tasks init --ttl 30m --max-attempts 5`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "ttl", Value: fence.DefaultTTL, EnvVars: []string{"FENCE_TTL"}, Usage: "default lease length"},
			&cli.IntFlag{Name: "max-attempts", Value: fence.DefaultMaxAttempts, Usage: "default attempts (fail or expiry) before a task goes to failed/"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("init takes no arguments (got %q); choose the tree with --dir or FENCE_DIR", c.Args().Slice())
			}
			d := fence.Defaults{TTL: c.Duration("ttl"), MaxAttempts: c.Int("max-attempts")}
			created, err := fence.InitTimeout(c.String("dir"), d, c.Duration("timeout"))
			if err != nil {
				return err
			}
			root, _ := filepath.Abs(c.String("dir"))
			out.print(map[string]any{"root": root, "created": created, "ttl": d.TTL.String(), "max_attempts": d.MaxAttempts}, func(w io.Writer) {
				if created {
					fmt.Fprintf(w, "created task tree %s (lease %s, max attempts %d)\n", root, d.TTL, d.MaxAttempts)
				} else {
					fmt.Fprintf(w, "task tree %s already exists; nothing changed\n", root)
				}
			})
			return nil
		},
	}
}
