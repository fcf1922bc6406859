package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/fencectl/fencectl/fence"
)

func runCommand(out *output) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "claim a task and run a command under its lease; stop it the moment the lease is lost",
		UsageText: "run [ID] [--agent A] [--ttl D] [--heartbeat D] [--grace D] [--wait D] [--loop [--jobs N]] [--request-id K] -- CMD [ARGS...]",
		Description: `Claims like claim, then runs CMD in its own process group with FENCE_DIR,
FENCE_AGENT, FENCE_TASK, FENCE_TOKEN, FENCE_TASK_FILE and FENCE_DEADLINE set,
and keeps the lease alive in the background (a heartbeat every ttl/3). It
follows the lease's real deadline: a heartbeat with the same token and a
shorter --ttl (CMD's own) is answered with one of run's own at once.

If the lease is lost (revoked, cancelled, reaped, taken over), CMD's process
group is killed at once (SIGTERM, then SIGKILL): another agent may hold the
task already. If it would run out before a heartbeat can get through (journal
busy, disk error), CMD gets SIGTERM at once and SIGKILL after --grace
(shortened so that it lands before the lease deadline). Either way the task is
not completed and run exits 3. With --loop a
lost lease ends that task only: the loop goes on with the next one.

Nothing CMD starts outlives its task: when the task ends (CMD exits, the
lease is lost, run is interrupted) every process CMD started is killed,
background and setsid children and daemons included. If run itself is killed
(even with SIGKILL) they are killed too, by the strongest means the machine
allows: a cgroup of its own, else a PID namespace, else the process group
(run --json names it as "containment"; FENCE_RUN_CONTAINMENT forces one).

CMD exits 0: the task is completed (fenced). Non-zero: the task is failed
with reason "exit status N", counting an attempt. run exits with CMD's own
status. But if CMD fails while run's stdout or stderr has no reader any more
(run --loop -- CMD | head), the failure is not the task's: it is released,
no attempt counted, and run stops with exit 141. CMD may settle its task itself with its own token: complete is
success (run exits 0); release and fail take effect as they are, and CMD is
then stopped as for a lost lease, since the task may go to another agent.

SIGINT, SIGTERM, SIGHUP or SIGQUIT to run is passed on to CMD (SIGKILL after
--grace if CMD ignores it), the task is then released, not failed, and run
exits with CMD's status. A signal while run waits for a task (--wait) ends it
at once without claiming (exit 128+N).

--loop after a short command (under 50 ms) claims ahead, so that tasks
share commits: with a core spare it keeps one more task in hand and
completes each task beside the next one's command; on a busy machine it
claims up to 8 tasks in one commit and completes them together in the next.
Tasks in hand have their leases kept, and wait only behind short commands:
once a command has run 200 ms, the completes that waited are made and the
tasks claimed ahead are released ("handed back unstarted"). If run dies, a
task whose command ended but whose complete had not committed is freed at
once, like one whose command was running, and will be run again.

--loop --jobs N runs up to N tasks at once in this one process, each
under its own lease, token and containment (a cgroup or a PID namespace of
its own; --jobs refuses to start where the machine allows neither). It is
faster than N separate runs: their claims and completions share journal
commits. The commands share run's stdout and stderr and read no stdin. A
command that cannot be started stops every job from claiming more.

--request-id K: a second run (or claim) with the same agent and K is refused
with exit 4 while a live process holds K; once it has ended, K recovers its
claim if that is still current.

   fencectl run --agent a1 -- ./build.sh
   fencectl run --loop --wait 1m --agent a1 -- sh -c 'make -f "$FENCE_TASK_FILE"'   # each task a makefile
   fencectl run --loop --jobs 8 --agent a1 -- ./test-one.sh
   fencectl run --request-id a1-42 --agent a1 -- ./job.sh   # safe to repeat after a crash

Exit codes: CMD's own status; 3 lease lost; 4 nothing to claim (not with
--loop, which ends with 0 when nothing is left), or the request id is held by
a live process; 128+N a signal ended run before CMD started.`,
		Flags: []cli.Flag{
			agentFlag(),
			&cli.DurationFlag{Name: "ttl", EnvVars: []string{"FENCE_TTL"}, Usage: "lease length (default: the tree's)"},
			&cli.DurationFlag{Name: "heartbeat", Usage: "time between heartbeats (default: ttl/3)"},
			&cli.DurationFlag{Name: "grace", Value: 10 * time.Second, Usage: "time between SIGTERM and SIGKILL when the lease is at risk, or run is signalled (shortened to land before the deadline); a lost lease gets none"},
			&cli.DurationFlag{Name: "wait", Usage: "keep trying this long while nothing is ready"},
			&cli.BoolFlag{Name: "loop", Usage: "keep claiming and running the next task until nothing is ready; a failed command or a lost lease ends that task only"},
			&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Value: 1, Usage: "with --loop: run up to N tasks side by side in this one process (each with its own lease and containment; their commits are shared)"},
			&cli.StringFlag{Name: "request-id", Usage: "idempotency key: repeating the call returns the same claim while it is current (refused while another live process holds it)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			out.stdoutIsCMDs = true
			id, argv, err := splitRunArgs(c.Args().Slice())
			if err != nil {
				return err
			}
			// CMD's steps read it: refused before a claim, not by each
			// of them after (found from outside).
			if err := checkDaemonVar(); err != nil {
				return err
			}
			cfg := runConfig{
				agent: agentName(c), ttl: c.Duration("ttl"), heartbeat: c.Duration("heartbeat"),
				grace: c.Duration("grace"), wait: c.Duration("wait"), argv: argv,
			}
			if cfg.ttl < 0 || cfg.heartbeat < 0 || cfg.grace < 0 || cfg.wait < 0 {
				return usagef("--ttl, --heartbeat, --grace and --wait must not be negative")
			}
			if cfg.ttl > 0 && cfg.heartbeat > cfg.ttl/2 {
				return usagef("--heartbeat %s is too long for --ttl %s: the lease would run out before a heartbeat lands; use at most half the ttl (the default is ttl/3)", cfg.heartbeat, cfg.ttl)
			}
			loop, requestID := c.Bool("loop"), c.String("request-id")
			if loop && (id != "" || requestID != "") {
				return usagef("--loop claims the next ready task each time: it takes no ID and no --request-id")
			}
			cfg.jobs = c.Int("jobs")
			switch {
			case cfg.jobs < 1 || cfg.jobs > maxJobs:
				return usagef("--jobs %d: give a number of tasks to run side by side, from 1 to %d", cfg.jobs, maxJobs)
			case cfg.jobs > 1 && !loop:
				return usagef("--jobs %d runs tasks side by side, one after another in each job: add --loop", cfg.jobs)
			}
			return withTree(c, out, func(t *fence.Tree) error {
				// Without --ttl the lease is the tree's: check --heartbeat
				// against that one, still before claiming.
				if cfg.ttl == 0 && cfg.heartbeat > 0 {
					d, err := t.Defaults(c.Context)
					if err != nil {
						return err
					}
					if cfg.heartbeat > d.TTL/2 {
						return usagef("--heartbeat %s is too long for the tree's lease of %s: the lease would run out before a heartbeat lands; use at most half of it, or give a longer --ttl", cfg.heartbeat, d.TTL)
					}
				}
				return runTasks(c.Context, t, cfg, id, requestID, loop, out)
			})
		},
	}
}

// maxJobs bounds --jobs: each job holds a lease, a keeper and a command.
const maxJobs = 256

// runSignals end run: each is passed on to CMD, then the task is released.
var runSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// runTasks claims and supervises one task, or with loop one after another
// until nothing is ready; with cfg.jobs > 1, that many loops side by side.
func runTasks(ctx context.Context, t *fence.Tree, cfg runConfig, id, requestID string, loop bool, out *output) error {
	jobs := max(cfg.jobs, 1)
	// A signal cancels claimCtx (a claim waiting with --wait ends at once,
	// and none is started after it) and reaches every command being run.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, runSignals...)
	defer signal.Stop(sigc)
	// A write of run's own to a stdout or stderr with no reader must not
	// kill it between a claim and its settle: Go exits on SIGPIPE from fd
	// 1 or 2 unless the signal is caught. Caught, not ignored: a command
	// still starts with SIGPIPE's default (see run_output.go).
	pipec := make(chan os.Signal, 1)
	signal.Notify(pipec, syscall.SIGPIPE)
	defer signal.Stop(pipec)
	claimCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var first atomic.Value // os.Signal
	sigs := make([]chan os.Signal, jobs)
	for k := range sigs {
		sigs[k] = make(chan os.Signal, 4)
	}
	go func() {
		for s := range sigc {
			if first.CompareAndSwap(nil, s) {
				cancel()
				if !out.json {
					fmt.Fprintf(out.stderr, "fencectl run: got %s: stopping (a running command gets it too, then its task is released; a complete still waiting for the journal is given up, and its task freed once run has ended)\n", s)
				}
			}
			for _, c := range sigs {
				select {
				case c <- s:
				default:
				}
			}
		}
	}()
	caught := func() syscall.Signal {
		if s, ok := first.Load().(syscall.Signal); ok {
			return s
		}
		return 0
	}

	var lock *fence.RequestLock
	if requestID != "" {
		l, err := t.LockRequest(cfg.agent, requestID)
		if err != nil {
			return err
		}
		defer l.Release()
		lock = l
	}
	var hold []*os.File
	if lock != nil {
		hold = append(hold, lock.File())
	}
	// The liveness anchor, for the guard to hold too; a .fence/live that
	// is no directory ties no claim, and run goes on untied (the keeper
	// warns).
	anchor, err := t.AnchorFile()
	if _, untied := errors.AsType[*fence.LiveDirError](err); err != nil && !untied {
		return err
	}
	if anchor != nil {
		defer anchor.Close()
		hold = append(hold, anchor)
	}
	cont, err := newContainment(hold, jobs)
	if err != nil {
		return err
	}
	defer cont.close()
	if out.noticeMu == nil {
		out.noticeMu = &sync.Mutex{} // the guard's watch tells from a goroutine of its own
	}
	cont.watchGuard(func(detail string) {
		out.notice(fence.Notice{Kind: fence.NoticeContainment, Name: cont.mode, Detail: detail})
	})
	if cont.mode == containPgroup && os.Getenv(containEnv) == "" {
		out.notice(fence.Notice{Kind: fence.NoticeContainment, Name: containPgroup, Detail: "a setsid child of CMD outlives run if run is killed with SIGKILL (" + strings.Join(cont.fallback, "; ") + ")"})
	}
	// CMD is looked up in PATH once, not for every task (exec.Command
	// does it on each call: a stat per PATH entry). If it is not found
	// now, each task looks again and reports it as before.
	if p, err := exec.LookPath(cfg.argv[0]); err == nil {
		cfg.path = p
	}
	jc, stopJobControl := startJobControl()
	defer stopJobControl()
	jc.spare, jc.holdWrites = cont.guardPid, t.HoldWrites
	sup := &supervisor{t: t, cfg: cfg, cont: cont, jobs: jc, sigs: sigs[0], out: out, claimCtx: claimCtx, loop: loop, caught: caught}
	if jobs == 1 {
		// Orphans of CMD's tree come to run (the subreaper) and are
		// reaped as they die. Set up once for every task, not per task:
		// signal.Stop waits for the signal handler to go idle, a cost run
		// --loop paid per task.
		sup.sigchld = make(chan os.Signal, 1)
		signal.Notify(sup.sigchld, syscall.SIGCHLD)
		defer signal.Stop(sup.sigchld)
		sup.gauge = newCPUGauge()
		return sup.work(ctx, id, requestID, lock)
	}
	return runJobs(ctx, sup, sigs)
}

// runJobs runs one loop per job side by side (run --loop --jobs N), each
// with its own view of the containment and its own signals, all on one
// Tree: their claims and completions share group commits, which is what
// makes N jobs in one run faster than N runs. Their commands share run's
// stdout and stderr, and read no stdin.
//
// A job that ends in an error that is not a task's own (CMD cannot be
// started, the journal fails) ends run: the other jobs claim nothing more
// (a claim waiting with --wait ends at once) and finish the task in hand.
// run exits with that first error, else with the first job's non-zero
// status (a signal), else 0.
func runJobs(ctx context.Context, base *supervisor, sigs []chan os.Signal) error {
	claimCtx, cancel := context.WithCancel(base.claimCtx)
	defer cancel()
	stop := new(atomic.Bool)
	halt := func() {
		stop.Store(true)
		cancel()
	}
	var (
		mu       sync.Mutex
		fatal    error
		reported error
		statuses = make([]error, len(sigs))
		outs     = make([]*output, len(sigs))
		wg       sync.WaitGroup
	)
	for k := range sigs {
		o := *base.out
		o.stdin, o.notices = nil, nil
		outs[k] = &o
		s := &supervisor{t: base.t, cfg: base.cfg, cont: base.cont.forJob(k + 1), jobs: base.jobs, sigs: sigs[k], out: outs[k],
			claimCtx: claimCtx, loop: true, caught: base.caught, stop: stop, halt: halt}
		wg.Go(func() {
			err := s.work(ctx, "", "", nil)
			if _, status := errors.AsType[exitStatus](err); err == nil || status {
				statuses[k] = err
				return
			}
			if errors.Is(err, context.Canceled) && stop.Load() {
				return // its claim was ended by halt: the error is another job's
			}
			mu.Lock()
			defer mu.Unlock()
			if fatal == nil {
				fatal, reported = err, outs[k].reported
				halt()
			}
		})
	}
	wg.Wait()
	for _, o := range outs {
		base.out.notices = append(base.out.notices, o.notices...)
	}
	if fatal != nil {
		base.out.reported = reported
		return fatal
	}
	for _, err := range statuses {
		if status, ok := errors.AsType[exitStatus](err); ok && status.code != 0 {
			return err
		}
	}
	return nil
}

// work claims and supervises one task, or with loop one after another
// until nothing is ready (or another job has stopped: run --jobs).
func (s *supervisor) work(ctx context.Context, id, requestID string, lock *fence.RequestLock) error {
	t, cfg, out, caught := s.t, s.cfg, s.out, s.caught
	// A claim made ahead that no command will run under (run is ending:
	// interrupted, or an error) is handed back, once the last task's
	// settle, if it still runs, has ended.
	defer func() {
		s.settleDue(ctx)
		for {
			next, ok := s.takeAhead()
			if !ok {
				break
			}
			if next.Err != nil {
				continue
			}
			reason := "run ended before the command started"
			if s := caught(); s != 0 {
				reason = "interrupted by " + s.String() + " before the command started"
			}
			_ = s.releaseUnstarted(ctx, next, reason)
		}
	}()
	// With --loop the next task is claimed alongside this one's
	// completion, in one group commit (see settleAndClaim). It never
	// waits: with --wait, a claim that finds nothing is made again,
	// waiting, at the top of the loop.
	var outage time.Time // when claims began to fail for want of the journal
	for {
		var (
			claim fence.ClaimResult
			err   error
			cur   claimed
		)
		if s.stop != nil && s.stop.Load() {
			return nil // another job has ended run
		}
		if next, ok := s.takeAhead(); ok && !(cfg.wait > 0 && errors.Is(next.Err, fence.ErrNothingToClaim)) {
			claim, err, cur = next.Claim, next.Err, next
		} else {
			if s := caught(); s != 0 {
				return exitStatus{code: 128 + int(s)}
			}
			claim, err = t.Claim(s.claimCtx, fence.ClaimRequest{ID: id, Agent: cfg.agent, TTL: cfg.ttl, Wait: cfg.wait, RequestID: requestID, RequestLock: lock, TieToProcess: true, TieUnstarted: true})
		}
		for _, r := range claim.Reaped {
			out.notice(fence.Notice{Kind: fence.NoticeReaped, Name: r.Task, Detail: describeReap(r)})
		}
		if sig := caught(); sig != 0 {
			// Interrupted while claiming: hand back a claim that came
			// through anyway, and start nothing.
			out.flushNotices()
			if err == nil {
				cur.Claim = claim
				if err := s.releaseUnstarted(ctx, cur, "interrupted by "+sig.String()+" before the command started"); err != nil {
					return err
				}
			}
			return exitStatus{code: 128 + int(sig)}
		}
		if s.loop && errors.Is(err, fence.ErrNothingToClaim) {
			return nil
		}
		if cfg.wait > 0 && journalCannotTake(err) && (outage.IsZero() || time.Since(outage) < cfg.wait) {
			// An outage of the journal (etcd restarting or out of
			// space, a lock held past --timeout) is not a tree with
			// nothing to do: run --wait, looping or not, waits it out
			// for up to --wait (found from outside: a ten-second etcd
			// freeze ended whole fleets of run --loop --wait).
			if outage.IsZero() {
				outage = time.Now()
				out.notice(fence.Notice{Kind: fence.NoticeWarning, Name: "journal", Detail: "cannot claim (" + err.Error() + "); trying again for up to --wait " + cfg.wait.String()})
				out.flushNotices()
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Second):
			}
			continue
		}
		if err != nil {
			return err
		}
		outage = time.Time{}
		if !out.json { // with --json they go into the task's summary
			out.flushNotices()
		}
		cur.Claim = claim
		r := s.task(ctx, cur)
		if r.behind {
			continue // its summary comes once it has settled
		}
		out.summary(claim, r)
		if r.err != nil {
			var (
				start *startError
				gone  *outputGoneError
			)
			if !s.loop || errors.As(r.err, &start) || errors.As(r.err, &gone) {
				return r.err
			}
			// A lost lease (or a refused settle) ends this task only.
			out.fail(r.err)
		}
		if !s.loop || r.interrupted {
			return exitStatus{code: r.code}
		}
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
			if id == "" { // `run "$TASK" -- CMD` with $TASK empty: not the next task
				return "", nil, usagef("the task ID before `--` is empty: give one, or none to run the next ready task")
			}
		}
		return id, after, nil
	}
	if len(args) > 0 && !slices.Contains(args, "--") {
		return "", nil, usagef("missing command: give it after `--` (%q is read as the task ID): usage: fencectl run [ID] [flags] -- CMD [ARGS...]", args[0])
	}
	return "", nil, usagef("missing command: usage: fencectl run [ID] [flags] -- CMD [ARGS...]")
}

type runConfig struct {
	agent                       string
	ttl, heartbeat, grace, wait time.Duration
	argv                        []string
	path                        string // argv[0] looked up in PATH once, if found
	jobs                        int    // --jobs: loops side by side in this run
}

// taskRun is how one supervised task ended.
type taskRun struct {
	code        int           // exit status for fencectl run
	outcome     string        // complete, fail, released, lease lost, …
	err         error         // a refusal to report (exit 3), or a start failure
	interrupted bool          // run got a signal: stop looping
	took        time.Duration // CMD's run time
	containment string        // cgroup, pidns or pgroup
	behind      bool          // settling beside the next task: reported later
}

// supervisor runs commands under their tasks' leases.
type supervisor struct {
	t           *fence.Tree
	cfg         runConfig
	cont        *containment
	jobs        *jobControl // stops and wakes the commands with run (Ctrl-Z)
	sigs        <-chan os.Signal
	sigchld     chan os.Signal // CMD's tree changed: orphans to reap (nil with --jobs)
	out         *output
	warnedWatch bool
	caught      func() syscall.Signal // the first signal run got, if any
	stop        *atomic.Bool          // run --jobs: another job has ended run
	halt        func()                // run --jobs: end the other jobs' claims
	// With --loop, held are the claims made ahead (see settleAndClaim),
	// oldest first, until takeAhead; prev is the last task while its
	// settle runs beside the next task's command (see settleBehind).
	loop     bool
	gauge    *cpuGauge // nil: never pipeline (run --jobs: the jobs overlap instead)
	claimCtx context.Context
	held     []claimed
	prev     *behind
	pending  []settling
}

// claimed is the outcome of a claim. A claim made ahead has its keeper
// started at once (keeperErr: why its watch could not be set up), so that
// its lease is kept and tied to this process while it waits for its turn.
type claimed struct {
	Claim     fence.ClaimResult
	Err       error
	keeper    *fence.LeaseKeeper
	keeperErr error
}

// pipelineBelow is how short a command must have been for run --loop to
// keep a second task in hand: the commit that completes a task (and
// claims the one after next) then runs while the next task's command
// does, on a machine's other core, instead of between the two commands.
// The task in hand waits at most for one more command, as short as this
// one was likely to be; its lease is kept meanwhile. Longer commands
// keep nothing in hand: a task is not held from other agents for long.
const pipelineBelow = 50 * time.Millisecond

// settling is a task whose command has ended, with its settle (its
// complete) and its outcome once settled.
type settling struct {
	claim  fence.ClaimResult
	settle func(context.Context)
	finish func() taskRun // the task's outcome, once settled; nil: not reported
}

// behind is tasks whose commands have ended and whose settle (and the
// claim of the task after next) runs beside the next command.
type behind struct {
	tasks []settling
	done  chan struct{}
	ahead []claimed // the settle's claims, once done
}

// settleAndClaim runs the settles of tasks (their completes, in order)
// and, with --loop, n claims of the next tasks alongside them, in one
// group commit (see fence.Tree.Together): one lock, one journal commit,
// one fsync per directory for all, instead of one each. The claims come
// after the settles, so a task that a completion unblocks is claimable to
// them. It returns the claims: the first whatever its outcome, the others
// only if they went through. Claims from inHand on are kept in hand,
// their keepers started at once; the one before (if any) is run next, and
// supervise starts its keeper as for any claim. It touches nothing of s
// but what stays put while a task runs: settleBehind runs it beside the
// next command.
func (s *supervisor) settleAndClaim(ctx context.Context, tasks []settling, n, inHand int) []claimed {
	if len(tasks) == 1 && (!s.loop || n <= 0) {
		tasks[0].settle(ctx)
		return nil
	}
	calls := make([]fence.GroupCall, 0, len(tasks)+max(n, 0))
	for _, task := range tasks {
		calls = append(calls, fence.GroupCall{Ctx: ctx, Fn: task.settle})
	}
	got := make([]claimed, max(n, 0))
	for i := range got {
		calls = append(calls, fence.GroupCall{Ctx: s.claimCtx, Fn: func(cctx context.Context) {
			c, err := s.t.Claim(cctx, fence.ClaimRequest{Agent: s.cfg.agent, TTL: s.cfg.ttl, TieToProcess: true, TieUnstarted: true})
			got[i] = claimed{Claim: c, Err: err}
		}})
	}
	s.t.Together(calls...)
	var ahead []claimed
	for i, c := range got {
		if c.Err != nil {
			if i == 0 {
				ahead = append(ahead, c)
			}
			continue
		}
		if i < inHand {
			ahead = append(ahead, c)
			continue
		}
		c.keeper, c.keeperErr, c.Err = s.startKeeper(ctx, c.Claim, true)
		if c.Err != nil {
			c.keeper = nil
		}
		ahead = append(ahead, c)
	}
	return ahead
}

// settleBehind runs the settles of tasks, and n claims of more tasks,
// beside the next task's command; finishBehind reports them.
func (s *supervisor) settleBehind(ctx context.Context, tasks []settling, n int) {
	b := &behind{tasks: tasks, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.ahead = s.settleAndClaim(ctx, tasks, n, 0)
	}()
	s.prev = b
}

// finishBehind waits for the last tasks' settle, if one runs, keeps its
// claims and prints the tasks' summaries (or their refusals).
func (s *supervisor) finishBehind() {
	b := s.prev
	if b == nil {
		return
	}
	<-b.done
	s.prev = nil
	s.held = append(s.held, b.ahead...)
	s.report(b.tasks)
}

// report prints the summaries of tasks that have settled.
func (s *supervisor) report(tasks []settling) {
	for _, task := range tasks {
		if task.finish == nil {
			continue // handed back unstarted: nothing to say
		}
		r := task.finish()
		r.containment = s.cont.mode
		s.out.summary(task.claim, r)
		if r.err != nil {
			s.out.fail(r.err) // a refused complete ends that task only
		}
	}
}

// settleDue settles every task whose command has ended: it waits for
// the settle running beside this command (finishBehind), and makes the
// completes waiting for a commit (see batchSize) in one of their own. The
// tasks' summaries are printed.
func (s *supervisor) settleDue(ctx context.Context) {
	s.finishBehind()
	if pending := s.takePending(); len(pending) > 0 {
		s.settleAndClaim(ctx, pending, 0, 0)
		s.report(pending)
	}
}

// holding reports whether run holds tasks for commands yet to come, or
// completes waiting for a commit.
func (s *supervisor) holding() bool {
	return len(s.pending) > 0 || slices.ContainsFunc(s.held, func(c claimed) bool { return c.Err == nil })
}

// handBack settles the completes waiting for a commit and releases the
// tasks claimed ahead, beside the command running now, which has turned
// out long: a task is not held from other agents while a long command
// runs, nor a finished one left unsettled. The next short command
// claims ahead again.
func (s *supervisor) handBack(ctx context.Context) {
	tasks := s.takePending()
	var kept []claimed
	for _, c := range s.held {
		if c.Err != nil {
			kept = append(kept, c) // nothing was claimed: the loop's end
			continue
		}
		tasks = append(tasks, settling{claim: c.Claim, settle: func(ctx context.Context) { _ = s.releaseUnstarted(ctx, c, reasonHandedBack) }})
	}
	s.held = kept
	s.settleBehind(ctx, tasks, 0)
}

// releaseUnstarted hands back a claim that no command has run under. Its
// keeper stops at once, but the claim stays tied to run until the release
// has an answer (see untieOnAnswer).
func (s *supervisor) releaseUnstarted(ctx context.Context, c claimed, reason string) error {
	untie := c.Claim.Tie.Untie // the claim to run next has no keeper yet
	if c.keeper != nil {
		untie = c.keeper.StopKeepingTie()
	}
	_, err := s.t.Release(ctx, fence.FencedRequest{ID: c.Claim.Task.ID, Token: c.Claim.Token, Agent: s.cfg.agent, Reason: reason})
	untieOnAnswer(err, untie)
	return err
}

// untieOnAnswer unties a claim from run once its settle has an answer:
// it committed, or it was refused (the task is not run's any more). A
// settle that failed otherwise (the journal held past --timeout, a full
// disk) leaves the claim tied, so that the task is freed the moment run
// ends ("holder died"), not when its lease runs out.
func untieOnAnswer(err error, untie func()) {
	_, refused := errors.AsType[*fence.StaleTokenError](err)
	_, recorded := errors.AsType[*fence.AfterCommitError](err) // the lease is over all the same
	if err == nil || refused || recorded {
		untie()
	}
}

// reasonHandedBack is the release reason of a task handBack gave back.
const reasonHandedBack = "handed back unstarted: the command before it ran long"

// takePending returns the tasks whose settles wait for the next commit,
// and forgets them.
func (s *supervisor) takePending() []settling {
	p := s.pending
	s.pending = nil
	return p
}

// batchSize is how many tasks run --loop claims at once after a command
// that took took, on a machine with no core to spare: as many as
// commands that short fit in pipelineBelow, 2 to maxBatch. A batch
// holds its tasks from other agents for about pipelineBelow at most.
func batchSize(took time.Duration) int {
	return min(maxBatch, max(2, int(shortBelow()/max(took, time.Millisecond))))
}

// handBackAfter is how long a command runs before the tasks held for the
// commands after it are handed back (see handBack): four times the
// longest command that claims ahead, so that commands of about that
// length do not keep handing tasks back.
func handBackAfter() time.Duration {
	if testHandBackAfter > 0 {
		return testHandBackAfter
	}
	return 4 * pipelineBelow
}

// shortBelow is pipelineBelow, or in the test build what a test asks for,
// so that its commands count as short however long the machine takes to
// start them.
func shortBelow() time.Duration {
	if testShortBelow > 0 {
		return testShortBelow
	}
	return pipelineBelow
}

// testHandBackAfter and testShortBelow, set by the test build, replace
// handBackAfter and pipelineBelow.
var testHandBackAfter, testShortBelow time.Duration

const (
	// maxBatch bounds the tasks run --loop holds at once.
	maxBatch = 8
	// batchLeaseRoom is how much lease a task must have left for its
	// complete to wait for the next commit.
	batchLeaseRoom = 2 * time.Second
)

// behindDone is closed once the last task's settle has ended (nil: none
// runs).
func (s *supervisor) behindDone() <-chan struct{} {
	if s.prev == nil {
		return nil
	}
	return s.prev.done
}

// takeAhead returns the oldest claim made ahead, if any, once.
func (s *supervisor) takeAhead() (claimed, bool) {
	if len(s.held) == 0 {
		return claimed{}, false
	}
	v := s.held[0]
	s.held = s.held[1:]
	return v, true
}

// hasNext reports whether a claimed task is in hand for the next command.
func (s *supervisor) hasNext() bool { return len(s.held) > 0 && s.held[0].Err == nil }

// task runs CMD under claim's lease and settles the task from its
// outcome, after killing everything CMD started.
func (s *supervisor) task(ctx context.Context, claim claimed) taskRun {
	r := s.supervise(ctx, claim)
	r.containment = s.cont.mode
	return r
}

// leaseTimes are how long before the deadline CMD is stopped (margin),
// and how long it may take to stop (grace), for claim's lease.
func (s *supervisor) leaseTimes(claim fence.ClaimResult) (length, margin, grace time.Duration) {
	length = claim.Task.Lease.TTL
	if length <= 0 {
		length = claim.Deadline.Sub(now())
	}
	// Stop CMD a margin before the deadline, never after; and give it no
	// more grace than a third of the lease.
	return length, min(time.Second, length/10), min(s.cfg.grace, length/3)
}

// startKeeper starts the keeper of claim's lease. err means there is none
// (a bad value); watchErr that it runs without its journal watch. ahead:
// the claim waits for its turn; its keeper watches the journal only from
// then on (see supervise), so that a task in hand is not checked on every
// commit of the tree.
func (s *supervisor) startKeeper(ctx context.Context, claim fence.ClaimResult, ahead bool) (keeper *fence.LeaseKeeper, watchErr, err error) {
	length, margin, grace := s.leaseTimes(claim)
	// Heartbeats always ask for the claim's length, so that a heartbeat
	// with a shorter --ttl by CMD is undone, not followed.
	keeper, err = s.t.NewKeeper(fence.KeeperConfig{
		Task: claim.Task.ID, Token: claim.Token, Agent: s.cfg.agent, Deadline: claim.Deadline,
		TTL: cmp.Or(s.cfg.ttl, length), Interval: s.cfg.heartbeat, StopBefore: grace + margin,
		// CMD dies with run: a dead run frees its task at once. The claim
		// was tied in its own commit (ClaimRequest.TieToProcess): a run
		// killed between the claim and this keeper frees it too.
		TieToProcess: true, Tie: claim.Tie,
		WatchLater: ahead,
	})
	if err != nil {
		return nil, nil, err
	}
	return keeper, keeper.Start(ctx), nil
}

func (s *supervisor) supervise(ctx context.Context, cur claimed) taskRun {
	t, cfg, out := s.t, s.cfg, s.out
	claim := cur.Claim
	_, margin, grace := s.leaseTimes(claim)
	keeper, watchErr := cur.keeper, cur.keeperErr
	if keeper == nil {
		var err error
		// The watch is up before CMD starts: a revoke cannot slip in between.
		keeper, watchErr, err = s.startKeeper(ctx, claim, false)
		if err != nil {
			s.settleDue(ctx)
			return taskRun{code: exitUsage, outcome: "not started", err: err}
		}
	}
	req := fence.FencedRequest{ID: claim.Task.ID, Token: claim.Token, Agent: cfg.agent}
	if err := watchErr; err != nil && !s.warnedWatch {
		s.warnedWatch = true
		kind := fence.NoticeNoWatch
		if _, watch := errors.AsType[*fence.WatchError](err); !watch {
			kind = fence.NoticeWarning // only the tie to this process failed
		}
		out.notice(fence.Notice{Kind: kind, Name: claim.Task.ID, Detail: err.Error()})
		if !out.json { // with --json it rides in the task's summary
			out.flushNotices()
		}
	}
	defer keeper.Stop()
	if cur.keeper != nil {
		// Claimed ahead: the watch is up now, before CMD starts, and the
		// lease has been checked: it may have been lost while it waited.
		if err := keeper.Watch(); err != nil && !s.warnedWatch {
			s.warnedWatch = true
			out.notice(fence.Notice{Kind: fence.NoticeNoWatch, Name: claim.Task.ID, Detail: err.Error()})
			if !out.json {
				out.flushNotices()
			}
		}
		select {
		case <-keeper.Lost():
			s.settleDue(ctx)
			return taskRun{code: exitFenced, outcome: "lease lost before the command started", err: keeper.Err()}
		default:
		}
	}

	cmd := &exec.Cmd{Path: cfg.path, Args: cfg.argv}
	if cfg.path == "" {
		cmd = exec.Command(cfg.argv[0], cfg.argv[1:]...)
	}
	cmd.Env = append(os.Environ(),
		"FENCE_DIR="+t.Root(),
		"FENCE_AGENT="+cfg.agent,
		"FENCE_TASK="+claim.Task.ID,
		"FENCE_TOKEN="+strconv.FormatUint(claim.Token, 10),
		"FENCE_TASK_FILE="+claim.Path,
		"FENCE_DEADLINE="+fmtTime(claim.Deadline),
	)
	if v := os.Getenv("FENCE_DAEMON"); v == "" || v == "on" {
		// A daemon CMD's steps started would live in the task's
		// containment, and die with the task while it served other
		// agents' steps (found from outside): CMD uses one that runs.
		cmd.Env = append(cmd.Env, "FENCE_DAEMON="+daemonExisting)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = out.stdin, out.rawStdout(), out.stderr
	select { // the last task's, if its orphans were reaped already
	case <-s.sigchld:
	default:
	}
	// From here a death of run counts as an attempt of the task: its
	// command may be what killed it. Claimed and not started, the task
	// would be released with none counted.
	if err := claim.Tie.Started(); err != nil {
		out.notice(fence.Notice{Kind: fence.NoticeWarning, Name: claim.Task.ID, Detail: err.Error() + " (should run die now, the task is released with no attempt counted)"})
	}
	start := time.Now()
	forget := func() {}
	err := s.cont.begin()
	if err == nil {
		// Own process group, so a stop reaches CMD's children too; killed
		// with us (parent-death signal); inside the run's containment.
		s.cont.prepare(cmd)
		// A Ctrl-Z from here on waits until CMD is known, then stops it.
		register := s.jobs.starting()
		err = cmd.Start()
		if err != nil {
			_ = s.cont.end()
			register(0, pausable{})
		} else {
			forget = register(cmd.Process.Pid, pausable{cgroup: s.cont.task, stopAt: func() time.Time { return keeper.Deadline().Add(-margin) }})
		}
	}
	if err != nil {
		untie := keeper.StopKeepingTie()
		s.settleDue(ctx)
		if s.halt != nil {
			s.halt() // before the release: no other job is to claim it again
		}
		_, rerr := t.Release(ctx, fence.FencedRequest{ID: req.ID, Token: req.Token, Agent: req.Agent, Reason: "command did not start"})
		untieOnAnswer(rerr, untie)
		return taskRun{code: exitNoCommand, outcome: "released (command did not start)", err: &startError{cmd: cfg.argv[0], err: errors.Join(err, rerr)}}
	}
	pgid := cmd.Process.Pid
	s.cont.started(pgid)
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()
	var (
		ended   error  // why the lease ended under CMD
		settled string // CMD settled its own task: completed, released, failed
		stopped bool   // run sent CMD SIGTERM because the task is no longer its
		sig     os.Signal
		killAt  time.Time
		lostC   = keeper.Lost()
		waitErr error
	)
	// The clock is looked at every 20 ms only once a SIGKILL is due (it
	// is the tree's clock, which tests move by hand): a task that ends by
	// itself never wakes run for it.
	var (
		tick  *time.Ticker
		tickC <-chan time.Time
	)
	killLater := func(at time.Time) {
		killAt = at
		if tick == nil {
			tick = time.NewTicker(20 * time.Millisecond)
			tickC = tick.C
		}
	}
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	// Tasks claimed ahead, and completes waiting for a commit, are for
	// short commands: once this one has run longer than that, they are
	// settled and handed back beside it (see handBack).
	var longC <-chan time.Time
	if s.holding() {
		long := time.NewTimer(handBackAfter())
		defer long.Stop()
		longC = long.C
	}

wait:
	for {
		select {
		case waitErr = <-waitc:
			break wait
		case <-longC:
			if s.prev != nil { // the last settle is still running: after it
				longC = time.After(10 * time.Millisecond)
				continue
			}
			longC = nil
			s.handBack(ctx)
		case <-lostC:
			lostC = nil
			ended = keeper.Err()
			why := printable(ended.Error())
			if how, ok := fence.SettledByHolder(ended); ok {
				settled = how
				if how == "completed" {
					continue // the task is done: let CMD finish
				}
				why = "the command " + how + " its own task, which may now go to another agent"
			}
			stopped = true
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			stopAt := now()
			killLater(minTime(stopAt.Add(grace), keeper.Deadline().Add(-margin)))
			if _, atRisk := errors.AsType[*fence.LeaseAtRiskError](ended); !atRisk {
				// The lease is over already (revoked, cancelled, reaped,
				// taken over, or ended by CMD itself): another agent may
				// hold the task now, and CMD writing on would write into
				// its file. No grace: the grace is for a lease that still
				// runs, to end before its deadline.
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				killAt = stopAt
			}
			if !out.json { // with --json the error object says it, once
				if killAt.Equal(stopAt) {
					fmt.Fprintf(out.stderr, "fencectl run: %s; killed %s (SIGTERM, then SIGKILL)\n", why, cfg.argv[0])
				} else {
					fmt.Fprintf(out.stderr, "fencectl run: %s; sent SIGTERM to %s, SIGKILL in %s\n", why, cfg.argv[0], max(killAt.Sub(stopAt), 0).Round(time.Millisecond))
				}
			}
		case sg := <-s.sigs:
			if sig == nil {
				sig = sg
				_ = syscall.Kill(-pgid, sg.(syscall.Signal))
				if at := now().Add(cfg.grace); killAt.IsZero() || at.Before(killAt) {
					killLater(at)
				}
			} else { // asked twice: stop now
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		case <-s.sigchld:
			s.cont.reapOrphans(pgid)
		case <-s.behindDone():
			s.finishBehind() // the last task has settled: report it now
		case <-tickC:
			if !killAt.IsZero() && !now().Before(killAt) {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				killAt = time.Time{}
			}
		}
	}
	forget()
	// The claim stays tied to this process until it is settled: if run
	// dies before that, the task is freed at once, not when its lease
	// runs out (a complete may wait for the next commit: see batchSize).
	untie := keeper.StopKeepingTie()
	tied := true // until a settle below has its say (see untieOnAnswer)
	defer func() {
		if tied {
			untie()
		}
	}()
	deadline := keeper.Deadline()
	took := time.Since(start)
	s.finishBehind()
	code := exitCodeOf(cmd.ProcessState, waitErr)
	// Nothing CMD started outlives the task: kill it all before settling.
	if left, err := s.cont.killAll(pgid); err != nil || left > 0 {
		what := fmt.Sprintf("%d processes", left)
		if left == 1 {
			what = "1 process"
		}
		detail := "the command left " + what + " behind, now killed"
		if err != nil {
			detail += "; " + err.Error()
		}
		out.notice(fence.Notice{Kind: fence.NoticeKilled, Name: claim.Task.ID, Detail: detail})
		if !out.json { // with --json it rides in the task's summary
			out.flushNotices()
		}
	}
	interrupted := sig != nil
	if settled != "" || ended != nil || sig != nil {
		// Only a complete or a fail settles beside the completes waiting
		// for a commit (see batchSize): they get one of their own first.
		s.settleDue(ctx)
	}
	if settled != "" {
		r := settledRun(settled, code, stopped)
		r.took, r.interrupted = took, interrupted
		return r
	}
	if ended != nil {
		return taskRun{code: exitFenced, outcome: "lease lost", err: ended, took: took, interrupted: interrupted}
	}
	var (
		res  fence.Result
		err2 error
		done = func(r taskRun) taskRun {
			if how, ok := fence.SettledByHolder(err2); ok {
				r = settledRun(how, code, false)
			}
			r.took, r.interrupted = took, interrupted
			return r
		}
	)
	if sig != nil {
		_, err2 = t.Release(ctx, fence.FencedRequest{ID: req.ID, Token: req.Token, Agent: req.Agent, Reason: "interrupted by " + sig.String()})
		tied = false
		untieOnAnswer(err2, untie)
		return done(taskRun{code: code, outcome: settleOutcome("release", err2, "released ("+sig.String()+")"), err: err2})
	}
	reason := "exit status " + strconv.Itoa(code)
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() {
		reason = "killed by " + st.Signal().String()
	}
	if code == 0 {
		tied = false // untied by its settle
		cur := settling{claim: claim, settle: func(ctx context.Context) {
			_, err2 = s.completeRetrying(ctx, req, deadline)
			untieOnAnswer(err2, untie)
		}, finish: func() taskRun { return done(completed(err2)) }}
		short := s.loop && s.gauge != nil && took < shortBelow()
		// Pipelined only when the command was short and a core is spare:
		// otherwise the task kept in hand is extra work that overlaps
		// nothing (see cpuGauge).
		pipeline := short && s.gauge.Spare()
		if pipeline && s.hasNext() {
			// The next task is in hand: run it now, and this commit
			// beside it.
			s.settleBehind(ctx, append(s.takePending(), cur), 1)
			return taskRun{behind: true}
		}
		batch := short && !pipeline
		if batch && s.hasNext() && deadline.Sub(now()) > batchLeaseRoom {
			s.pending = append(s.pending, cur)
			return taskRun{behind: true}
		}
		want := 1
		switch {
		case pipeline:
			want = 2 // one to run next, one to keep in hand
		case batch:
			want = batchSize(took)
		}
		// With nothing in hand, the first claim is run next.
		pending := s.takePending()
		s.held = append(s.held, s.settleAndClaim(ctx, append(pending, cur), want-len(s.held), min(1, 1-len(s.held)))...)
		s.report(pending)
	} else if stream := out.outputGone(); stream != "" {
		// CMD failed writing to a reader that has gone: not the task's
		// failure (see run_output.go).
		s.settleDue(ctx)
		if s.halt != nil {
			s.halt() // before the release: no other job is to claim it again
		}
		_, err2 = t.Release(ctx, fence.FencedRequest{ID: req.ID, Token: req.Token, Agent: req.Agent, Reason: "run's " + stream + " has no reader (" + reason + ")"})
		tied = false
		untieOnAnswer(err2, untie)
		return done(taskRun{code: exitBrokenPipe, outcome: settleOutcome("release", err2, "released ("+stream+" has no reader)"), err: &outputGoneError{stream: stream, err: err2}})
	} else {
		// Not alongside the next claim: a task failed back to available
		// has its file moved only after the commit, and a claim in the
		// same transaction would find it still in claimed/ and skip it.
		req.Reason = reason
		pending := s.takePending()
		tied = false
		s.settleAndClaim(ctx, append(pending, settling{settle: func(ctx context.Context) {
			res, err2 = t.Fail(ctx, req)
			untieOnAnswer(err2, untie)
		}}), 0, 0)
		s.report(pending)
	}
	switch {
	case code == 0:
		return done(completed(err2))
	case err2 != nil:
		return done(taskRun{code: exitFenced, outcome: settleOutcome("fail", err2, ""), err: err2})
	}
	return done(taskRun{code: code, outcome: fmt.Sprintf("fail (%s; attempt %d of %d, now %s)", reason, res.Task.Attempts, res.Task.MaxAttempts, res.Task.State)})
}

// completeRetrying completes req, and again while the journal cannot
// take it (busy past --timeout, etcd unreachable or out of space, a full
// disk) and the lease, which ends at deadline, has time left: a complete
// with run's token is safe to repeat. Given up at once, it left a task
// whose command had succeeded to be reaped at its TTL, charged an
// attempt and run again, or failed for good with --max-attempts 1 (found
// from outside, with etcd out of space for a minute). A signal to run
// ends the tries: the task stays tied to run, and is freed when run ends.
// Its first write is the one a group commit (Together) waits for; the
// others commit alone.
func (s *supervisor) completeRetrying(ctx context.Context, req fence.FencedRequest, deadline time.Time) (fence.Result, error) {
	wait := 100 * time.Millisecond
	for tries := 1; ; tries++ {
		res, err := s.t.Complete(ctx, req)
		left := deadline.Sub(now())
		if err == nil || !journalCannotTake(err) || ctx.Err() != nil || s.caught() != 0 || left <= wait {
			return res, err
		}
		if tries == 1 {
			s.out.notice(fence.Notice{Kind: fence.NoticeWarning, Name: req.ID, Detail: "complete not recorded (" + err.Error() + "); trying again until the lease ends, " + left.Round(time.Second).String() + " from now (a signal to run stops trying)"})
			if !s.out.json {
				s.out.flushNotices()
			}
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// journalCannotTake reports an error that says the journal could not take
// a step for now, nothing of it recorded: busy past --timeout, etcd
// unreachable or out of its space quota, a full disk or quota.
func journalCannotTake(err error) bool {
	if _, recorded := errors.AsType[*fence.AfterCommitError](err); recorded {
		return false
	}
	return errors.Is(err, fence.ErrBusy) || errors.Is(err, fence.ErrJournalFull) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// completed is the outcome of a task whose command exited 0, from its
// complete's error.
func completed(err error) taskRun {
	if err != nil {
		return taskRun{code: exitFenced, outcome: settleOutcome("complete", err, ""), err: err}
	}
	return taskRun{code: 0, outcome: "complete"}
}

// settleOutcome is the outcome of a settle (verb: complete, release,
// fail): done if it went through, "refused" if the task was no longer
// run's, "recorded, not finished" if the journal has it but what follows
// its commit failed, and "not recorded" if it did not get through at all (the
// journal held past --timeout, the disk): the task is then still run's,
// tied to it until run ends (see untieOnAnswer).
func settleOutcome(verb string, err error, done string) string {
	if err == nil {
		return done
	}
	if _, refused := errors.AsType[*fence.StaleTokenError](err); refused {
		return verb + " refused"
	}
	if _, after := errors.AsType[*fence.AfterCommitError](err); after {
		return verb + " recorded, not finished" // its files, or the journal's sync
	}
	return verb + " not recorded"
}

// settledRun is the outcome of a task CMD settled itself with its own
// token. A completion is success. A release hands the task back: CMD's
// status, or 0 if run stopped CMD. A fail is a failure: CMD's status, or
// 1 if that was 0 or run stopped CMD.
func settledRun(how string, code int, stopped bool) taskRun {
	r := taskRun{outcome: how + " by the command"}
	switch how {
	case "completed":
		r.code = 0
	case "released":
		if !stopped {
			r.code = code
		}
	default:
		r.code = code
		if stopped || code == 0 {
			r.code = 1
		}
	}
	return r
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

// summary prints one line per supervised task on stderr (stdout is
// CMD's). With --json it is one object per task; for a task that ended in
// an error (a lost lease) that object is the error object, carrying the
// summary as "run", and the error is not reported again (see fail).
func (o *output) summary(claim fence.ClaimResult, r taskRun) {
	if o.json {
		j := &runJSON{
			Containment: r.containment, ExitCode: r.code, Outcome: r.outcome, Seconds: r.took.Seconds(),
			Task: claim.Task.ID, Token: claim.Token,
		}
		if r.err != nil {
			o.reportError(r.err, j)
			return
		}
		o.writeResult(o.stderr, j)
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
