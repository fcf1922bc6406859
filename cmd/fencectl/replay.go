package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func replayCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "rebuild state from the event log and repair the tree",
		UsageText: "replay [--check]",
		Description: `Folds the event log into task records, compares them with the stored records
and indexes, and compares the directories with them. Without --check it
rewrites records that differ from the log, moves misplaced files, adopts valid
unknown files (in the state of their directory; claimed/ ones as available)
and moves second copies to .fence/quarantine. A task whose file is in no
directory fails with reason "task file missing" (a done one stays done): put
its content in failed/ and requeue it to run it again. Nothing is deleted. A
second run changes nothing.

--check changes nothing and exits 7 if it finds any drift, listing it. Plain
replay exits 7 only if something is left that it cannot repair (a symlink or
other non-task entry in a state directory).

   fencectl replay --check || fencectl replay`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "check", Usage: "report drift and exit 7 if any; change nothing"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("replay takes no arguments (got %q)", c.Args().Slice())
			}
			return withTree(c, out, func(t *fence.Tree) error {
				check := c.Bool("check")
				rep, err := t.Replay(c.Context, check)
				if err != nil {
					return err
				}
				drift := len(rep.Findings)
				if !check {
					drift = rep.Unfixed()
				}
				findings := newFindings(rep.Findings)
				if findings == nil {
					findings = []findingJSON{}
				}
				out.print(&replayJSON{Check: check, Drift: drift, Events: rep.Events, Findings: findings, Tasks: rep.Tasks}, func(w io.Writer) {
					for _, f := range rep.Findings {
						mark := "drift"
						if f.Fixed {
							mark = "fixed"
						}
						fmt.Fprintf(w, "%s: %s\n", mark, printable(f.Describe()))
					}
					switch {
					case len(rep.Findings) == 0:
						fmt.Fprintf(w, "ok: %d events, %d tasks; tree and journal agree\n", rep.Events, rep.Tasks)
					case check:
						fmt.Fprintf(w, "%d finding(s); run `fencectl replay` to repair\n", len(rep.Findings))
					default:
						fmt.Fprintf(w, "%d finding(s), %d repaired, %d left for you\n", len(rep.Findings), len(rep.Findings)-drift, drift)
					}
				})
				if drift > 0 {
					return silentExit{code: exitDrift}
				}
				return nil
			})
		},
	}
}

// silentExit ends a command with a code after its result was printed.
type silentExit struct{ code int }

func (e silentExit) Error() string { return fmt.Sprintf("exit %d", e.code) }
