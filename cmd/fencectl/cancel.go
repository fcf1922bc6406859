package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func cancelCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "end a task that has not finished: it goes to failed/ (operator)",
		UsageText: "cancel ID [--reason R]",
		Description: `Moves a task that has not finished (waiting, available or claimed) to failed/
with the reason "cancelled" (or "cancelled: R" with --reason R). If it was
claimed, the holder's token is dead from then on: its holder is refused (exit 3)
with lost_by "cancelled". No attempt is counted; only requeue brings the task
back. Cancelling a cancelled task again answers success and changes nothing. A
done task, or one that failed for another reason, is refused (exit 4).

   fencectl cancel build-42 --reason "superseded by build-43"
   fencectl cancel build-42 --json     # "cancelled_token": the token that died, 0 if none`,
		Flags: []cli.Flag{agentFlag(), reasonFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			id, err := oneArg(c, "task ID")
			if err != nil {
				return err
			}
			return withTree(c, out, func(t *fence.Tree) error {
				res, err := t.Cancel(c.Context, id, agentName(c), c.String("reason"))
				if err != nil {
					return err
				}
				var dead uint64
				if res.Event != nil {
					dead = res.Event.Token
				}
				out.print(newCancel(res.Task, res.Path, dead, res.Retry), func(w io.Writer) {
					switch {
					case res.Retry:
						fmt.Fprintf(w, "%s: already cancelled; nothing changed\n", id)
					case dead != 0:
						fmt.Fprintf(w, "%s: cancelled; lease of token %d ended; task is failed\n", id, dead)
					default:
						fmt.Fprintf(w, "%s: cancelled; task is failed\n", id)
					}
				})
				return nil
			})
		},
	}
}
