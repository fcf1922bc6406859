package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

func initCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "create a task tree and its journal (idempotent)",
		UsageText: "init [--ttl 10m] [--max-attempts 3] [--retry-backoff 1s] [--journal etcd://HOST:PORT[,HOST:PORT...]/PREFIX] [--allow-network-fs]",
		Description: `Creates the root if missing, inbox/ waiting/ available/ claimed/ done/ failed/
out/ and .fence/ with the journal. The settings become the tree's defaults
(fencectl defaults shows and changes them). --retry-backoff D makes a task
whose attempt failed wait in waiting/ for D (doubled per further attempt,
capped, jittered) before a claim may take it again.

On an existing tree it checks the journal and changes nothing (exit 0); if
--ttl or --max-attempts differ from the tree's settings it says so and exits
2, since they did not apply. Of several inits at once, one creates the tree
and the others find it. A directory whose state directories hold files but
that has no journal is refused (exit 2): run recover to rebuild its journal.
A bbolt journal on a file system other hosts may reach (NFS, SMB, Ceph,
FUSE…) is refused (exit 2), since its lock and memory map do not hold
across hosts; --allow-network-fs makes it anyway, for a tree that one host
alone uses (every command then warns).

   fencectl --dir /srv/tasks init --ttl 30m --max-attempts 5
   fencectl init --retry-backoff 2s

With --journal the journal lives in etcd under PREFIX (one prefix per tree),
so agents on several hosts can share a tree whose files are on a filesystem
they all mount. The tree records the choice in .fence/journal.json (mode
0600, never a secret), with the new journal's tree id, and every later
command uses it with no flag; a journal another tree made at the prefix
(after this tree's was wiped) is refused (exit 1), never acted on. TLS:
--etcd-cacert, --etcd-cert, --etcd-key (or FENCE_ETCD_CACERT, _CERT, _KEY);
user and password only from FENCE_ETCD_USERNAME and FENCE_ETCD_PASSWORD.

   fencectl --dir /shared/tasks init --journal etcd://10.0.0.5:2379,10.0.0.6:2379/ci-tasks`,
		Flags: append([]cli.Flag{
			&cli.DurationFlag{Name: "ttl", Value: fence.DefaultTTL, EnvVars: []string{"FENCE_TTL"}, Usage: "default lease length"},
			&cli.IntFlag{Name: "max-attempts", Value: fence.DefaultMaxAttempts, Usage: "default attempts (fail or expiry) before a task goes to failed/"},
			&cli.DurationFlag{Name: "retry-backoff", Value: fence.DefaultRetryBackoff, Usage: "wait after a failed attempt before a task may be claimed again, doubled per attempt (0: none)"},
			&cli.BoolFlag{Name: "allow-network-fs", Usage: "make a bbolt journal even on a network file system (NFS, SMB, FUSE…): only if one host alone uses the tree"},
			jsonFlag(),
		}, journalFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("init takes no arguments (got %q); choose the tree with --dir or FENCE_DIR", c.Args().Slice())
			}
			d := record.Defaults{TTL: c.Duration("ttl"), MaxAttempts: c.Int("max-attempts"), RetryBackoff: c.Duration("retry-backoff")}
			o := setupOptions(c)
			var err error
			if o.Journal, err = journalChoice(c); err != nil {
				return err
			}
			o.AllowNetworkFS = c.Bool("allow-network-fs")
			res, err := fence.InitTree(c.String("dir"), d, o)
			if err != nil {
				return err
			}
			if !res.Created {
				if differ := askedOtherSettings(c, res.Defaults); differ != "" {
					return usagef("task tree %s already exists with lease %s and max attempts %d; init never changes an existing tree, so %s did not apply; nothing changed (leave them out, or set them per task: add --max-attempts, claim --ttl)", res.Root, res.Defaults.TTL, res.Defaults.MaxAttempts, differ)
				}
			}
			d = res.Defaults
			out.print(&initJSON{Created: res.Created, MaxAttempts: d.MaxAttempts, Root: res.Root, TTL: d.TTL.String()}, func(w io.Writer) {
				if res.Created {
					fmt.Fprintf(w, "created task tree %s (lease %s, max attempts %d)\n", res.Root, d.TTL, d.MaxAttempts)
				} else {
					fmt.Fprintf(w, "task tree %s already exists (lease %s, max attempts %d); nothing changed\n", res.Root, d.TTL, d.MaxAttempts)
				}
			})
			return nil
		},
	}
}

// askedOtherSettings names the settings given on the command line that
// differ from the existing tree's, "" if none. A --ttl that only repeats
// FENCE_TTL is not counted: agents export FENCE_TTL for their claims, and
// an idempotent `init` in their start-up must not fail over it.
func askedOtherSettings(c *cli.Context, have record.Defaults) string {
	var differ []string
	if ttl := c.Duration("ttl"); c.IsSet("ttl") && ttl != have.TTL {
		if env, err := time.ParseDuration(os.Getenv("FENCE_TTL")); err != nil || env != ttl {
			differ = append(differ, "--ttl "+ttl.String())
		}
	}
	if n := c.Int("max-attempts"); c.IsSet("max-attempts") && n != have.MaxAttempts {
		differ = append(differ, fmt.Sprintf("--max-attempts %d", n))
	}
	if b := c.Duration("retry-backoff"); c.IsSet("retry-backoff") && b != have.RetryBackoff {
		differ = append(differ, "--retry-backoff "+b.String())
	}
	return strings.Join(differ, " and ")
}
