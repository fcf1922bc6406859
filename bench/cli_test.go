package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// agentCLI runs fencectl commands on one tree as agent processes do: one
// process per command. A command that exits 5 (busy: the lock was not
// obtained within FENCE_TIMEOUT, 10 s by default) is run again, as an
// agent would, and counted.
type agentCLI struct {
	bin  string
	env  []string
	busy atomic.Int64
}

// newAgentCLI runs bin on the tree at dir. Its steps go where fencectl
// sends them: the front (make build's
// fencectl) sends them to the tree's daemon, whose CPU is the
// benchmark's (servers.addDaemon).
func newAgentCLI(b *testing.B, bin, dir string, extraEnv ...string) *agentCLI {
	servers.addDaemon(b, dir)
	env := append(os.Environ(), "FENCE_DIR="+dir)
	return &agentCLI{bin: bin, env: append(env, extraEnv...)}
}

func (a *agentCLI) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(a.bin, args...)
	cmd.Env = a.env
	return cmd
}

// output runs a command to success, retrying while it exits busy.
func (a *agentCLI) output(args ...string) ([]byte, error) {
	for {
		out, err := outputOf(a.cmd(args...))
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 5 {
			a.busy.Add(1)
			continue
		}
		return out, err
	}
}

// reportBusy reports how many commands exited busy and were run again.
func (a *agentCLI) reportBusy(b *testing.B) {
	if n := a.busy.Load(); n > 0 {
		b.ReportMetric(float64(n), "busy-retries")
	}
}

// claim runs `fencectl claim --agent A --format env` and returns the task
// id, the token and how long the process took.
func (a *agentCLI) claim(agent string) (id, token string, lat time.Duration, err error) {
	var out []byte
	lat, err = timed(func() (err error) {
		out, err = a.output("claim", "--agent", agent, "--format", "env")
		return err
	})
	if err != nil {
		return "", "", lat, fmt.Errorf("fencectl claim: %w", helperErr(err))
	}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		v = strings.Trim(v, "'")
		switch k {
		case "FENCE_TASK":
			id = v
		case "FENCE_TOKEN":
			token = v
		}
	}
	if id == "" || token == "" {
		return "", "", lat, fmt.Errorf("fencectl claim printed no task or token: %q", out)
	}
	return id, token, lat, nil
}

func (a *agentCLI) complete(id, token string) error {
	if _, err := a.output("complete", id, "--token", token); err != nil {
		return fmt.Errorf("fencectl complete %s: %w", id, helperErr(err))
	}
	return nil
}

// cliCycle is one claim + complete through the binary; it returns the
// claim's latency.
func (a *agentCLI) cycle(agent string) (time.Duration, error) {
	id, token, lat, err := a.claim(agent)
	if err != nil {
		return lat, err
	}
	return lat, a.complete(id, token)
}

// cliCycles is how many claim + complete cycles one batch does.
const cliCycles = 1000

// BenchmarkCLI_ClaimComplete is claim + complete through the release
// binary (make build's tags) with 1, 2, 8 and 16 agent processes at once:
// every step is one process start, one lock, one journal commit and one
// file move. p50/p99 are of the claim process alone.
func BenchmarkCLI_ClaimComplete(b *testing.B) {
	for _, procs := range []int{1, 2, 8, 16} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			benchCLICycle(b, procs)
		})
	}
}

// BenchmarkCLI_ClaimCompleteBboltLock is the same with FENCE_LOCK_MODE=bbolt:
// no blocking flock on .fence/lock, only bbolt's own lock, which polls
// every 50 ms. The lockmode metric is 1 if the binary honoured the
// variable (checked on the tree before the run), 0 if it ignored it, in
// which case the figures are the flock ones again.
func BenchmarkCLI_ClaimCompleteBboltLock(b *testing.B) {
	for _, procs := range []int{1, 8, 16} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			benchCLICycle(b, procs, "FENCE_LOCK_MODE=bbolt")
		})
	}
}

func benchCLICycle(b *testing.B, procs int, extraEnv ...string) {
	n := cliCycles * b.N
	dir := newTree(b, n)
	cli := newAgentCLI(b, fencectlBin, dir, extraEnv...)
	honoured := -1.0
	if len(extraEnv) > 0 {
		var err error
		if honoured, err = boltLockHonoured(cli, dir); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer() // (this also drops metrics reported before it)
	r := runWorkers(b, procs, n, func(w, _ int) (time.Duration, error) {
		return cli.cycle(fmt.Sprintf("agent-%d", w))
	})
	b.StopTimer()
	report(b, r)
	cli.reportBusy(b)
	if honoured >= 0 {
		b.ReportMetric(honoured, "lockmode")
	}
}

// boltLockHonoured tells whether the binary, run with cli's environment,
// skips .fence/lock: with this process holding that lock exclusively, a
// `status` that still takes it fails busy; one that skips it succeeds.
func boltLockHonoured(cli *agentCLI, dir string) (float64, error) {
	f, err := os.OpenFile(filepath.Join(dir, ".fence", "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	err = cli.cmd("status", "--timeout", "300ms").Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 1, nil
	case errors.As(err, &ee) && ee.ExitCode() == 5:
		return 0, nil
	}
	return 0, fmt.Errorf("probe FENCE_LOCK_MODE=bbolt: status: %w", err)
}

// cliClaims is how many claims one batch of BenchmarkCLI_Claim makes.
const cliClaims = 1200

// BenchmarkCLI_Claim is claims alone (one process each, no complete) at 8
// processes: for the release binary (make build's fencectl, the front,
// whose steps go to the tree's daemon), for fencectl-full, the full
// command set that commits in its own process, and for a plain `go build`
// of it: the figure to
// set against the hello-world ceiling. x-hello is claims/s over the rate of
// hello-world run 8 ways right before and right after (hello-runs/s), the
// same as BenchmarkCeiling_HelloWorld/procs=8 but adjacent in time.
func BenchmarkCLI_Claim(b *testing.B) {
	for _, build := range []struct{ name, bin string }{{"release", fencectlBin}, {"full", fencectlFullBin}, {"plain", fencectlPlainBin}} {
		b.Run(fmt.Sprintf("build=%s/procs=8", build.name), func(b *testing.B) {
			n := cliClaims * b.N
			cli := newAgentCLI(b, build.bin, newTree(b, n))
			againstHello(b, func() run {
				return runWorkers(b, 8, n, func(w, _ int) (time.Duration, error) {
					_, _, lat, err := cli.claim(fmt.Sprintf("agent-%d", w))
					return lat, err
				})
			})
			cli.reportBusy(b)
		})
	}
}

// againstHello times claims (a run of one-process-per-claim claims, 8
// ways) between two runs of hello-world 8 ways, and reports it with
// x-hello: its claims/s over the hello-world rate measured right before
// and right after, so that load from elsewhere hits both sides of the
// ratio alike, and hello-cpu-ms: the CPU of one hello-world run, to set
// beside the claims' cpu-ms/claim.
func againstHello(b *testing.B, claims func() run) {
	hello := func() run {
		return runWorkers(b, 8, ceilingRuns/2, func(int, int) (time.Duration, error) {
			return timed(func() error { return exec.Command(helloBin).Run() })
		})
	}
	before := hello()
	b.ResetTimer()
	r := claims()
	b.StopTimer()
	after := hello()
	report(b, r)
	helloRate := float64(before.ops+after.ops) / (before.elapsed + after.elapsed).Seconds()
	b.ReportMetric(helloRate, "hello-runs/s")
	if before.cpu > 0 && after.cpu > 0 {
		b.ReportMetric(ms(before.cpu+after.cpu)/float64(before.ops+after.ops), "hello-cpu-ms")
	}
	b.ReportMetric(float64(r.ops)/r.elapsed.Seconds()/helloRate, "x-hello")
}
