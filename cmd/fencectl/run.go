package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func runCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "claim a task and run a command under its lease; stop it the moment the lease is lost",
		UsageText: "run [ID] [--agent A] [--ttl D] [--heartbeat D] [--grace D] [--wait D] [--loop] [--request-id K] -- CMD [ARGS...]",
		Description: `Claims like claim, then runs CMD in its own process group with FENCE_DIR,
FENCE_AGENT, FENCE_TASK, FENCE_TOKEN, FENCE_TASK_FILE and FENCE_DEADLINE set,
and keeps the lease alive in the background (a heartbeat every ttl/3).

If the lease is lost (revoked, reaped, taken over) or would run out before a
heartbeat can get through (journal busy, disk error), CMD's process group gets
SIGTERM at once and SIGKILL after --grace (shortened so that it lands before
the lease deadline); the task is not completed and run exits 3. If run itself
is killed, CMD is killed with it.

CMD exits 0: the task is completed (fenced). Non-zero: the task is failed
with reason "exit status N", counting an attempt. run exits with CMD's own
status. SIGINT or SIGTERM to run is passed on to CMD, and the task is then
released, not failed.

   fencectl run --agent a1 -- ./build.sh
   fencectl run --loop --wait 1m --agent a1 -- sh -c 'make -C "$FENCE_TASK_FILE"'
   fencectl run --request-id a1-42 --agent a1 -- ./job.sh   # safe to repeat after a crash

Exit codes: CMD's own status; 3 lease lost; 4 nothing to claim (not with
--loop, which ends with 0 when nothing is left).`,
		Flags: []cli.Flag{
			agentFlag(),
			&cli.DurationFlag{Name: "ttl", EnvVars: []string{"FENCE_TTL"}, Usage: "lease length (default: the tree's)"},
			&cli.DurationFlag{Name: "heartbeat", Usage: "time between heartbeats (default: ttl/3)"},
			&cli.DurationFlag{Name: "grace", Value: 10 * time.Second, Usage: "time between SIGTERM and SIGKILL when the lease is lost (shortened to land before the deadline)"},
			&cli.DurationFlag{Name: "wait", Usage: "keep trying this long while nothing is ready"},
			&cli.BoolFlag{Name: "loop", Usage: "keep claiming and running the next task until nothing is ready"},
			&cli.StringFlag{Name: "request-id", Usage: "idempotency key: repeating the call returns the same claim while it is current"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			id, argv, err := splitRunArgs(c.Args().Slice())
			if err != nil {
				return err
			}
			cfg := runConfig{
				agent: agentName(c), ttl: c.Duration("ttl"), heartbeat: c.Duration("heartbeat"),
				grace: c.Duration("grace"), wait: c.Duration("wait"), argv: argv,
			}
			if cfg.ttl < 0 || cfg.heartbeat < 0 || cfg.grace < 0 || cfg.wait < 0 {
				return usagef("--ttl, --heartbeat, --grace and --wait must not be negative")
			}
			loop, requestID := c.Bool("loop"), c.String("request-id")
			if loop && (id != "" || requestID != "") {
				return usagef("--loop claims the next ready task each time: it takes no ID and no --request-id")
			}
			return withTree(c, out, func(t *fence.Tree) error {
				sigc := make(chan os.Signal, 2)
				signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
				defer signal.Stop(sigc)
				for {
					claim, err := t.Claim(c.Context, fence.ClaimRequest{ID: id, Agent: cfg.agent, TTL: cfg.ttl, Wait: cfg.wait, RequestID: requestID})
					for _, r := range claim.Reaped {
						out.notice(fence.Notice{Kind: "reaped", Name: r.Task, Detail: describeReap(r)})
					}
					if loop && errors.Is(err, fence.ErrNothingToClaim) {
						return nil
					}
					if err != nil {
						return err
					}
					out.flushNotices()
					r := superviseTask(c.Context, t, cfg, claim, sigc, out)
					out.summary(claim, r)
					if r.err != nil {
						return r.err
					}
					if !loop || r.interrupted {
						return exitStatus{code: r.code}
					}
				}
			})
		},
	}
}

// splitRunArgs splits `[ID] -- CMD [ARGS...]`.
func splitRunArgs(args []string) (id string, argv []string, err error) {
	for i, a := range args {
		if a != "--" {
			continue
		}
		before, after := args[:i], args[i+1:]
		if len(after) == 0 {
			break
		}
		if len(before) > 1 {
			return "", nil, usagef("run takes at most one task ID before `--` (got %q)", before)
		}
		if len(before) == 1 {
			id = before[0]
		}
		return id, after, nil
	}
	return "", nil, usagef("missing command: usage: fencectl run [ID] [flags] -- CMD [ARGS...]")
}

type runConfig struct {
	agent                       string
	ttl, heartbeat, grace, wait time.Duration
	argv                        []string
}

// taskRun is how one supervised task ended.
type taskRun struct {
	code        int           // exit status for fencectl run
	outcome     string        // complete, fail, released, lease lost, …
	err         error         // a refusal to report (exit 3), or a start failure
	interrupted bool          // run got SIGINT/SIGTERM: stop looping
	took        time.Duration // CMD's run time
}

// superviseTask runs CMD under claim's lease and settles the task from
// its outcome.
func superviseTask(ctx context.Context, t *fence.Tree, cfg runConfig, claim fence.ClaimResult, sigc <-chan os.Signal, out *output) taskRun {
	length := claim.Task.Lease.TTL
	if length <= 0 {
		length = claim.Deadline.Sub(fence.Now())
	}
	// Stop CMD a margin before the deadline, never after; and give it no
	// more grace than a third of the lease.
	margin := min(time.Second, length/10)
	grace := min(cfg.grace, length/3)
	keeper, err := t.NewKeeper(fence.KeeperConfig{
		Task: claim.Task.ID, Token: claim.Token, Agent: cfg.agent, Deadline: claim.Deadline,
		TTL: cfg.ttl, Interval: cfg.heartbeat, StopBefore: grace + margin,
	})
	if err != nil {
		return taskRun{code: exitUsage, outcome: "not started", err: err}
	}
	req := fence.FencedRequest{ID: claim.Task.ID, Token: claim.Token, Agent: cfg.agent}

	cmd := exec.Command(cfg.argv[0], cfg.argv[1:]...)
	cmd.Env = append(os.Environ(),
		"FENCE_DIR="+t.Root(),
		"FENCE_AGENT="+cfg.agent,
		"FENCE_TASK="+claim.Task.ID,
		"FENCE_TOKEN="+strconv.FormatUint(claim.Token, 10),
		"FENCE_TASK_FILE="+claim.Path,
		"FENCE_DEADLINE="+fmtTime(claim.Deadline),
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = out.stdin, out.stdout, out.stderr
	// Own process group, so a stop reaches CMD's children too; and killed
	// with us (parent-death signal) so it never lives on unfenced.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		_, rerr := t.Release(ctx, fence.FencedRequest{ID: req.ID, Token: req.Token, Agent: req.Agent, Reason: "command did not start"})
		return taskRun{code: exitNoCommand, outcome: "released (command did not start)", err: &startError{cmd: cfg.argv[0], err: errors.Join(err, rerr)}}
	}
	_ = keeper.Start(ctx)
	pgid := cmd.Process.Pid
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()

	var (
		lost    error
		signal  os.Signal
		killAt  time.Time
		lostC   = keeper.Lost()
		waitErr error
	)
wait:
	for {
		select {
		case waitErr = <-waitc:
			break wait
		case <-lostC:
			lostC = nil
			lost = keeper.Err()
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			now := fence.Now()
			killAt = minTime(now.Add(grace), keeper.Deadline().Add(-margin))
			fmt.Fprintf(out.stderr, "fencectl run: %s; sent SIGTERM to %s, SIGKILL in %s\n", printable(lost.Error()), cfg.argv[0], max(killAt.Sub(now), 0).Round(time.Millisecond))
		case s := <-sigc:
			if signal == nil {
				signal = s
				_ = syscall.Kill(-pgid, s.(syscall.Signal))
			} else { // asked twice: stop now
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		case <-tick.C:
			if !killAt.IsZero() && !fence.Now().Before(killAt) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				killAt = time.Time{}
			}
		}
	}
	keeper.Stop()
	took := time.Since(start)
	code := exitCodeOf(cmd.ProcessState, waitErr)
	if lost != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // nothing of CMD's group lives on unfenced
		return taskRun{code: exitFenced, outcome: "lease lost", err: lost, took: took}
	}
	if signal != nil {
		_, err := t.Release(ctx, fence.FencedRequest{ID: req.ID, Token: req.Token, Agent: req.Agent, Reason: "interrupted by " + signal.String()})
		return taskRun{code: code, outcome: "released (" + signal.String() + ")", err: err, interrupted: true, took: took}
	}
	if code == 0 {
		if _, err := t.Complete(ctx, req); err != nil {
			return taskRun{code: exitFenced, outcome: "complete refused", err: err, took: took}
		}
		return taskRun{code: 0, outcome: "complete", took: took}
	}
	reason := "exit status " + strconv.Itoa(code)
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		reason = "killed by " + st.Signal().String()
	}
	req.Reason = reason
	res, err := t.Fail(ctx, req)
	if err != nil {
		return taskRun{code: exitFenced, outcome: "fail refused", err: err, took: took}
	}
	return taskRun{code: code, outcome: fmt.Sprintf("fail (%s; attempt %d of %d, now %s)", reason, res.Task.Attempts, res.Task.MaxAttempts, res.Task.State), took: took}
}

// exitCodeOf is CMD's status the way a shell reports it: its exit code,
// or 128 + the signal that killed it.
func exitCodeOf(ps *os.ProcessState, waitErr error) int {
	if ps == nil {
		return exitError
	}
	if st, ok := ps.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		return 128 + int(st.Signal())
	}
	return ps.ExitCode()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// summary prints one line per supervised task on stderr.
func (o *output) summary(claim fence.ClaimResult, r taskRun) {
	if o.json {
		o.writeJSON(o.stderr, map[string]any{
			"task": claim.Task.ID, "token": claim.Token, "seconds": r.took.Seconds(), "outcome": r.outcome, "exit_code": r.code,
		})
		return
	}
	fmt.Fprintf(o.stderr, "fencectl run: %s token %d %s %s\n", claim.Task.ID, claim.Token, r.took.Round(time.Millisecond), r.outcome)
}

// exitStatus ends fencectl with a code and no message: CMD's own status.
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitNoCommand is what shells exit with when a command cannot be found.
const exitNoCommand = 127

// startError is a CMD that could not be started: exit 127, as a shell
// would; the task was released.
type startError struct {
	cmd string
	err error
}

func (e *startError) Error() string {
	return fmt.Sprintf("cannot start %q: %v; the task was released", e.cmd, e.err)
}

func (e *startError) Unwrap() error { return e.err }
