package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func revokeCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "revoke",
		Usage:     "free a lease without its token (operator)",
		UsageText: "revoke ID [--reason R]",
		Description: `Moves a claimed task back to available/ without counting an attempt. The old
token is dead from then on: its holder is refused with lost_by "revoked".

   fencectl revoke build-42 --reason "agent host is gone"`,
		Flags: []cli.Flag{agentFlag(), reasonFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			id, err := oneArg(c, "task ID")
			if err != nil {
				return err
			}
			return withTree(c, out, func(t *fence.Tree) error {
				prev := uint64(0)
				res, err := t.Revoke(c.Context, id, agentName(c), c.String("reason"))
				if err != nil {
					return err
				}
				if res.Event != nil {
					prev = res.Event.Token
				}
				out.print(newRevoke(res.Task, res.Path, prev), func(w io.Writer) {
					fmt.Fprintf(w, "%s: lease of token %d revoked; task is available\n", id, prev)
				})
				return nil
			})
		},
	}
}
