package main

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

func defaultsCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "defaults",
		Usage:     "show or change the tree's defaults: lease, attempts, retry backoff (operator)",
		UsageText: "defaults [--ttl D] [--max-attempts N] [--retry-backoff D] [--retry-backoff-max D]",
		Description: `With no flags, prints the tree's defaults. With flags, changes them in one
transaction, recorded in the log as a defaults event (replay folds it); what
is not given stays. New tasks and claims use them from then on; a task keeps
the max attempts it was added with.

--ttl is the lease a claim gets without its own --ttl. --max-attempts is how
many failed attempts (fail, or a lease that expired) send a new task to
failed/. --retry-backoff is how long a task waits in waiting/ after a failed
attempt before a claim may take it again: attempt n waits
retry-backoff·2^(n−1), at most --retry-backoff-max (0: 1h), give or take 20%
jitter; 0 turns backoff off. release, revoke and requeue never back off.
A bad value exits 2 and changes nothing.

   fencectl defaults
   fencectl defaults --retry-backoff 5s --retry-backoff-max 10m
   fencectl defaults --ttl 30m --max-attempts 5 --json`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "ttl", Usage: "default lease length"},
			&cli.IntFlag{Name: "max-attempts", Usage: "default attempts before failed/"},
			&cli.DurationFlag{Name: "retry-backoff", Usage: "wait after the first failed attempt (0: no backoff)"},
			&cli.DurationFlag{Name: "retry-backoff-max", Usage: "the backoff's cap (0: 1h)"},
			agentFlag(), jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("defaults takes no arguments (got %q); give --ttl, --max-attempts, --retry-backoff or --retry-backoff-max to change one", c.Args().Slice())
			}
			req := fence.DefaultsRequest{Agent: agentName(c)}
			durs := map[string]**time.Duration{"ttl": &req.TTL, "retry-backoff": &req.RetryBackoff, "retry-backoff-max": &req.RetryBackoffMax}
			for name, p := range durs {
				if c.IsSet(name) {
					v := c.Duration(name)
					*p = &v
				}
			}
			if c.IsSet("max-attempts") {
				n := c.Int("max-attempts")
				req.MaxAttempts = &n
			}
			return withTree(c, out, func(t *fence.Tree) error {
				var d record.Defaults
				changed := false
				var err error
				if req.TTL == nil && req.MaxAttempts == nil && req.RetryBackoff == nil && req.RetryBackoffMax == nil {
					d, err = t.Defaults(c.Context)
				} else {
					d, changed, err = t.SetDefaults(c.Context, req)
				}
				if err != nil {
					return err
				}
				out.print(newDefaults(d, changed), func(w io.Writer) {
					fmt.Fprintf(w, "ttl                %s\nmax attempts       %d\nretry backoff      %s\nretry backoff max  %s\n",
						d.TTL, d.MaxAttempts, d.RetryBackoff, backoffMax(d))
					if changed {
						fmt.Fprintln(w, "(changed)")
					}
				})
				return nil
			})
		},
	}
}

// backoffMax is the cap the tree's backoff uses.
func backoffMax(d record.Defaults) time.Duration {
	if d.RetryBackoffMax > 0 {
		return d.RetryBackoffMax
	}
	return max(fence.DefaultRetryBackoffMax, d.RetryBackoff)
}

// defaultsJSON is the answer of defaults: the tree's defaults, and
// whether this call changed them (a defaults event was recorded).
type defaultsJSON struct {
	Changed     bool `json:"changed"`
	MaxAttempts int  `json:"max_attempts"`
	notices
	RetryBackoff    string `json:"retry_backoff"`
	RetryBackoffMax string `json:"retry_backoff_max"`
	TTL             string `json:"ttl"`
}

func newDefaults(d record.Defaults, changed bool) *defaultsJSON {
	return &defaultsJSON{Changed: changed, MaxAttempts: d.MaxAttempts, RetryBackoff: d.RetryBackoff.String(), RetryBackoffMax: backoffMax(d).String(), TTL: d.TTL.String()}
}
