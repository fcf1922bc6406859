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
		UsageText: "replay [--check | --restored]",
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

--restored is for a tree put back from a backup whole (journal and token
ceiling files together: a tar of the tree, a volume snapshot; on etcd a
snapshot restore with a copy of .fence): nothing left on disk knows the
tokens issued since the backup, so it first moves the token counter above the
restored ceiling and 2^32 µs (about 71 minutes) above the clock, then
repairs as replay does. A token issued after the backup is then refused.

   fencectl replay --check || fencectl replay
   fencectl replay --restored     # right after restoring a whole-tree backup`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "check", Usage: "report drift and exit 7 if any; change nothing"},
			&cli.BoolFlag{Name: "restored", Usage: "the tree was put back from a backup whole: first move the token counter above every token issued since"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("replay takes no arguments (got %q)", c.Args().Slice())
			}
			if c.Bool("check") && c.Bool("restored") {
				return usagef("--check changes nothing and --restored raises the token counter: give one of them")
			}
			return withTree(c, out, func(t *fence.Tree) error {
				check := c.Bool("check")
				var counter uint64
				if c.Bool("restored") {
					var err error
					if counter, err = t.AfterRestore(c.Context); err != nil {
						return err
					}
				}
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
				out.print(&replayJSON{Check: check, Drift: drift, Events: rep.Events, Findings: findings, Tasks: rep.Tasks, TokensAbove: counter}, func(w io.Writer) {
					if counter > 0 {
						fmt.Fprintf(w, "restored: new tokens start above %d\n", counter)
					}
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
