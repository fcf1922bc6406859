package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func heartbeatCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "heartbeat",
		Usage:     "extend the lease of a task you hold",
		UsageText: "heartbeat ID --token T [--ttl D]",
		Description: `Sets the lease deadline to now + ttl (default: the lease length the claim
asked for), if T is the task's current, unexpired
token; otherwise exit 3 and nothing changes. Heartbeat well inside the lease
(every ttl/3 is a good rhythm).

   fencectl heartbeat build-42 --token "$FENCE_TOKEN" --ttl 10m`,
		Flags: fencedFlags(&cli.DurationFlag{Name: "ttl", EnvVars: []string{"FENCE_TTL"}, Usage: "new lease length from now (default: the claim's own)"}),
		Action: fencedAction(out, (*fence.Tree).Heartbeat, func(w io.Writer, r fence.Result) {
			fmt.Fprintf(w, "%s: lease extended to %s (%s)\n", r.Task.ID, fmtTime(r.Task.Lease.Deadline), fmtLeft(r.Task.Lease.Deadline.Sub(now())))
		}),
	}
}
