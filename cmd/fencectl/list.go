package main

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// defaultListLimit is how many tasks a page of list holds unless --limit
// says otherwise.
const defaultListLimit = 100

func listCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "the tasks, in id order, a page at a time",
		UsageText: "list [--state S] [--agent A] [--blocked] [--label L]... [--limit N] [--after ID]",
		Description: `One line per task: id, state, priority, attempts of max attempts, the agent
holding it (claimed tasks), and the lease's deadline (claimed), why it waits
(waiting: "blocked by a,b", "scheduled for T", "backing off until T after
attempt N") or the task's age (the others).

Pages: --limit N tasks (default 100, 0 for all), starting after the id
--after names (the cursor). When more tasks follow, the last line is the
command for the next page. With --json the answer is one JSON array of the
objects show --json prints, without their events and journal; the next page
starts --after the last task's id, and an array shorter than --limit (or
empty) is the last page. Notices (a world-writable tree, say) follow the
array as {"notice",…} objects of their own, so with jq take the array only:
jq 'arrays | …'.

--state waiting selects the tasks no claim can take yet; --blocked those of
them that wait for other tasks (show ID says what each of those is doing);
--label L the tasks that carry L (repeatable: every label).

A page reads the journal from the cursor on, never every task. --state,
--agent, --blocked and --label are applied while reading, so a page of a
rare state may read far past the cursor before it is full.

   fencectl list
   fencectl list --state claimed --agent ci-3
   fencectl list --limit 50 --after build-0042
   fencectl list --state failed --json | jq -r 'arrays | .[].task'
   fencectl list --blocked
   fencectl list --state waiting
   fencectl list --label gpu --state available`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "state", Usage: "only tasks in this state: " + strings.Join(fence.StateNames(), ", ")},
			&cli.StringFlag{Name: "agent", Usage: "only the tasks this agent holds (claimed)"},
			&cli.IntFlag{Name: "limit", Value: defaultListLimit, Usage: "at most N tasks a page (0: all)"},
			&cli.StringFlag{Name: "after", Usage: "start after this task id: the last id of the previous page"},
			&cli.BoolFlag{Name: "blocked", Usage: "only waiting tasks that wait for others"},
			&cli.StringSliceFlag{Name: "label", Usage: "only tasks with this label (repeatable: all of them)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("list takes no arguments (got %q); use `fencectl show ID` for one task, --after ID to page", c.Args().Slice())
			}
			if err := checkText("agent", c.String("agent")); err != nil {
				return err
			}
			f := fence.ListFilter{State: record.State(c.String("state")), Agent: c.String("agent"), After: c.String("after"), Limit: c.Int("limit"),
				Blocked: c.Bool("blocked"), Labels: c.StringSlice("label")}
			return withTree(c, out, func(t *fence.Tree) error {
				p, err := t.List(c.Context, f)
				if err != nil {
					return err
				}
				if out.json {
					tasks := make([]*taskJSON, 0, len(p.Tasks))
					for _, r := range p.Tasks {
						tasks = append(tasks, newTask(r, t.Path(r.ID, r.State)))
					}
					out.writeJSON(out.stdout, tasks)
					return nil
				}
				writeList(out.stdout, p.Tasks)
				if p.More {
					fmt.Fprintln(out.stdout, "next: "+nextPage(c, p.Tasks[len(p.Tasks)-1].ID))
				}
				return nil
			})
		},
	}
}

func writeList(w io.Writer, tasks []record.Task) {
	if len(tasks) == 0 {
		fmt.Fprintln(w, "no tasks")
		return
	}
	at := now()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tPRIORITY\tLABELS\tATTEMPTS\tAGENT\tDEADLINE/AGE")
	for _, r := range tasks {
		agent, when := "-", "age "+max(at.Sub(r.Created), 0).Round(time.Second).String()
		if r.State == record.Claimed && r.Lease != nil {
			agent = printable(r.Lease.Agent)
			when = fmtTime(r.Lease.Deadline) + " (" + fmtLeft(r.Lease.Deadline.Sub(at)) + ")"
		}
		state := string(r.State)
		if wait, ok := fence.WaitOf(r); ok {
			when = wait.String() // what it waits for says more than its age
		}
		labels := "-"
		if len(r.Labels) > 0 {
			labels = printable(strings.Join(r.Labels, ","))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d/%d\t%s\t%s\n", r.ID, state, r.Priority, labels, r.Attempts, r.MaxAttempts, agent, when)
	}
	tw.Flush()
}

// nextPage is the command that lists the page after last: the same
// filters and limit, the cursor moved on.
func nextPage(c *cli.Context, last string) string {
	args := []string{"fencectl", "list", "--after", last}
	if c.IsSet("limit") {
		args = append(args, "--limit", fmt.Sprint(c.Int("limit")))
	}
	for _, name := range []string{"state", "agent"} {
		if v := c.String(name); v != "" {
			args = append(args, "--"+name, shellWord(v))
		}
	}
	if c.Bool("blocked") {
		args = append(args, "--blocked")
	}
	for _, l := range c.StringSlice("label") {
		args = append(args, "--label", shellWord(l))
	}
	return printable(strings.Join(args, " "))
}

var plainWord = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9@%+=:,./_-]+$`) })

// shellWord is s as one word of a POSIX shell command line: as it is if
// nothing in it is special to the shell, else quoted.
func shellWord(s string) string {
	if plainWord().MatchString(s) {
		return s
	}
	return shellQuote(s)
}
