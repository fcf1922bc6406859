package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

func recoverCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "recover",
		Usage:     "rebuild a lost or unreadable journal from the tree's directories",
		UsageText: "recover [--ttl D] [--max-attempts N]",
		Description: `When .fence/journal.db is lost or damaged, recover moves the damaged file aside
(journal.db.damaged-<time>, never deleted), makes a new journal and adopts
every task in the state its directory says. Tasks in claimed/ have no lease
any more: they come back available (their files move to available/), and
every old token is refused from then on, since new tokens start above any
the old journal can have issued. Tasks in waiting/ come back available too:
what they waited for was in the lost journal (the report lists them as no
longer waiting, "released" in --json; set --after makes one wait again).
Attempts start again at 0. A second copy of a task in another state
directory goes to .fence/quarantine (the most final state wins: done,
failed, claimed, available). The old defaults are kept when they can still
be read; otherwise --ttl and --max-attempts apply.

New tokens start above the token ceiling (.fence/tokens, and .fence-tokens in
the root, which survives rm -rf .fence), above what the damaged journal still
shows and above the clock, so no old token is ever issued again.

The new journal is written in as many commits as the store takes (etcd takes
--max-txn-ops operations in one), and the files move after the last. A
recover cut short (a crash, a move that failed) leaves .fence/recovering and
says so: run recover again, which sets the unfinished journal aside too and
rebuilds it from the directories.

It refuses, changing nothing: a readable journal (exit 2: use replay); a
journal of another schema version, written by a newer fencectl (exit 1: it is
not damaged, use that fencectl); a directory that is not a task tree, with no
.fence/, no .fence-tokens and not all four state directories (exit 2: check
--dir); on etcd, a journal that another tree made at the prefix after this
tree's was wiped (exit 1: recover must not set it aside; give this tree a
prefix of its own in .fence/journal.json, then run recover). On etcd the new
journal's tree id goes into .fence/journal.json.

   fencectl recover && fencectl status`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "ttl", Value: fence.DefaultTTL, EnvVars: []string{"FENCE_TTL"}, Usage: "default lease length, if the old one cannot be read"},
			&cli.IntFlag{Name: "max-attempts", Value: fence.DefaultMaxAttempts, Usage: "default attempts, if the old value cannot be read"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("recover takes no arguments (got %q); choose the tree with --dir or FENCE_DIR", c.Args().Slice())
			}
			d := record.Defaults{TTL: c.Duration("ttl"), MaxAttempts: c.Int("max-attempts")}
			rep, err := fence.Recover(c.String("dir"), d, setupOptions(c))
			if err != nil {
				return err
			}
			out.print(newRecover(rep), func(w io.Writer) {
				switch {
				case rep.KeptAside != "" && rep.Unfinished:
					fmt.Fprintf(w, "kept the journal an earlier recover did not finish as %s\n", rep.KeptAside)
				case rep.KeptAside != "":
					fmt.Fprintf(w, "kept the damaged journal as %s\n", rep.KeptAside)
				}
				fmt.Fprintf(w, "rebuilt the journal of %s: %d available, %d done, %d failed", rep.Root, rep.Counts[record.Available], rep.Counts[record.Done], rep.Counts[record.Failed])
				if len(rep.Freed) > 0 {
					fmt.Fprintf(w, " (%d freed from claimed/)", len(rep.Freed))
				}
				fmt.Fprintf(w, "\nnew tokens start above %d; every older token is refused\n", rep.FirstToken)
				if !rep.DefaultsKept {
					// A tree made with --ttl 30s would otherwise come back
					// with 10-minute leases without a word.
					fmt.Fprintf(w, "the old defaults could not be read: leases of %s, %d attempts (--ttl and --max-attempts of recover; `fencectl defaults` changes them)\n", rep.Defaults.TTL, rep.Defaults.MaxAttempts)
				}
				if len(rep.Released) > 0 {
					fmt.Fprintf(w, "%d no longer waiting (what they waited for was in the lost journal; `fencectl set ID --after ...` makes one wait again): %s\n", len(rep.Released), printable(idList(rep.Released, 10)))
				}
				for _, f := range rep.Findings {
					fmt.Fprintf(w, "%s\n", printable(f.Describe()))
				}
			})
			return nil
		},
	}
}

// idList names ids: the first limit of them, then how many more.
func idList(ids []string, limit int) string {
	if len(ids) <= limit {
		return strings.Join(ids, " ")
	}
	return fmt.Sprintf("%s and %d more (--json lists all)", strings.Join(ids[:limit], " "), len(ids)-limit)
}
