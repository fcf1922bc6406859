// Command report turns the output of the fencectl benchmarks (go test
// -bench ./bench/) into docs/BENCHMARKS.md: the machine, the date, the
// command, one table row per benchmark with a sentence on what it means,
// and the targets of the benchmarks issue as ratios with PASS or MISS.
//
//	go test -tags urfave_cli_no_docs -run '^$' -bench . -benchtime 1x -timeout 60m ./bench/ 2>&1 | tee bin/bench.out
//	go run ./bench/report -cmd "go test …" -o docs/BENCHMARKS.md < bin/bench.out
//
// With -count > 1 every figure is the median of its samples. The document
// is written only if the input holds benchmark results; the exit status is
// 1 if any benchmark failed (the document then lists the failures).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	cmd := flag.String("cmd", "", "how the input was produced, shown in the document: a go test command line (shown as what make bench runs) or e.g. \"make bench\"")
	outPath := flag.String("o", "", "write the document here (default: stdout)")
	flag.Parse()
	res, err := parse(os.Stdin)
	if err != nil {
		fatal(err)
	}
	if len(res.order) == 0 {
		fatal(fmt.Errorf("no benchmark results in the input (did go test fail to build?)%s", failText(res)))
	}
	var doc bytes.Buffer
	write(&doc, res, *cmd, time.Now().UTC())
	if *outPath == "" {
		os.Stdout.Write(doc.Bytes())
	} else if err := os.WriteFile(*outPath, doc.Bytes(), 0o644); err != nil {
		fatal(err)
	}
	if len(res.failures) > 0 || !res.ok {
		fmt.Fprintf(os.Stderr, "report: some benchmarks failed; the document lists them%s\n", failText(res))
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "report:", err)
	os.Exit(1)
}

func failText(r *results) string {
	if len(r.failures) == 0 {
		return ""
	}
	return ":\n  " + strings.Join(r.failures, "\n  ")
}

// results is what the go test output said.
type results struct {
	config   map[string]string               // goos, cpu, benchfs, …
	order    []string                        // benchmark names, first seen first
	samples  map[string]map[string][]float64 // name → unit → values
	failures []string                        // "--- FAIL: name: message"
	ok       bool                            // go test printed "ok"
	total    string                          // the package's run time, e.g. "412.3s"
}

// runs is how many times the benchmarks ran (go test -count): the most
// samples any benchmark's ns/op has.
func (r *results) runs() int {
	n := 0
	for _, units := range r.samples {
		n = max(n, len(units["ns/op"]))
	}
	return n
}

// get is the median of name's samples of unit.
func (r *results) get(name, unit string) (float64, bool) {
	vs := r.samples[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	return s[len(s)/2], true
}

var (
	configLine = regexp.MustCompile(`^([a-z][a-zA-Z0-9-]*): (.*)$`)
	procSuffix = regexp.MustCompile(`-\d+$`)
	okLine     = regexp.MustCompile(`^ok\s+\S+\s+(\S+)`)
)

func parse(in io.Reader) (*results, error) {
	r := &results{config: map[string]string{}, samples: map[string]map[string][]float64{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var failing string // name of the failure whose message lines follow
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Benchmark"):
			failing = ""
			parseBench(r, line)
		case strings.HasPrefix(line, "--- FAIL: "):
			failing = strings.TrimPrefix(line, "--- FAIL: ")
			r.failures = append(r.failures, failing)
		case failing != "" && strings.HasPrefix(line, "    "):
			if msg := strings.TrimSpace(line); msg != "" {
				r.failures[len(r.failures)-1] += ": " + msg
			}
		case okLine.MatchString(line):
			r.ok = true
			r.total = okLine.FindStringSubmatch(line)[1]
		default:
			failing = ""
			if m := configLine.FindStringSubmatch(line); m != nil {
				r.config[m[1]] = m[2]
			}
		}
	}
	// A parent whose sub-benchmark failed is listed alone too: keep only
	// the entries that carry a message.
	var kept []string
	for _, f := range r.failures {
		if strings.Contains(f, ": ") {
			kept = append(kept, f)
		}
	}
	if len(kept) > 0 {
		r.failures = kept
	}
	return r, sc.Err()
}

func parseBench(r *results, line string) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return // a name alone (the benchmark's own output follows)
	}
	if _, err := strconv.Atoi(f[1]); err != nil {
		return
	}
	name := procSuffix.ReplaceAllString(f[0], "")
	if _, seen := r.samples[name]; !seen {
		r.order = append(r.order, name)
		r.samples[name] = map[string][]float64{}
	}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			continue
		}
		r.samples[name][f[i+1]] = append(r.samples[name][f[i+1]], v)
	}
}

// ---- the document

func write(w io.Writer, r *results, cmd string, now time.Time) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Benchmarks\n\n")
	p("<!-- Generated by `make bench` (bench/report). Do not edit by hand: change bench/ and run `make bench`. -->\n\n")
	p("fencectl against the patterns people use today — a bare `mv` claim, and a\n")
	p("flock'd JSON state file — and against the disk's and the machine's own limits,\n")
	p("all measured in one run, on one file system. The suite is `bench/`\n")
	p("(`go test -bench`); its lines are benchstat's format, so two runs compare with\n")
	p("`benchstat old.txt new.txt`.\n\n")

	p("## The run\n\n| | |\n|---|---|\n")
	if t, err := time.Parse(time.RFC3339, r.config["benchdate"]); err == nil {
		now = t.UTC() // when the run started, if it said
	}
	p("| Date | %s |\n", now.Format("2006-01-02 15:04 MST"))
	switch {
	case cmd == "":
		p("| Command | `make bench` |\n")
	case strings.HasPrefix(cmd, "go "):
		p("| Command | `make bench`, which runs `%s` |\n", strings.ReplaceAll(cmd, "|", `\|`))
	default:
		p("| Command | `%s` |\n", strings.ReplaceAll(cmd, "|", `\|`))
	}
	p("| Machine | %s |\n", machine(r))
	p("| Go | %s %s/%s |\n", runtime.Version(), orDash(r.config["goos"]), orDash(r.config["goarch"]))
	p("| Disk | %s, trees under `%s` (the floor, the baselines and every tree are on it) |\n", orDash(r.config["benchfs"]), orDash(r.config["benchdir"]))
	p("| Load | %s |\n", load(r))
	if r.total != "" {
		what := "building the binaries"
		if _, ok := r.samples["BenchmarkClaimNext/tasks=1M"]; ok {
			what += " and the 1M-task tree"
		}
		p("| Time | %s for the whole suite, %s included |\n", r.total, what)
	}
	if n := r.runs(); n > 1 {
		p("| Samples | every benchmark ran %d times; each figure below is the median of its %d |\n", n, n)
	}
	p("\n")
	if v, err := strconv.ParseFloat(r.config["benchothercpu"], 64); err == nil && v > noisy {
		p("> **This run shared the machine with other work**: other processes used %.0f%%\n", v)
		p("> of the CPU while it ran (see the other-CPU column). On a 2-core machine that\n")
		p("> slows every row, unevenly; treat the figures and the targets below as\n")
		p("> provisional and run `make bench` again on a quiet machine.\n\n")
	}

	p("## Targets\n\n")
	p("Ratios from this one run. Where a target is missed the figure is the state of\n")
	p("the code at the time of the run; see the closing note of the benchmarks issue\n")
	p("for what each optimisation bought.\n\n")
	p("| Target | Measured | Required | Result |\n|---|---|---|---|\n")
	for _, t := range targets {
		v, detail, ok := t.measure(r)
		if !ok {
			p("| %s | n/a (%s) | %s | — |\n", t.what, detail, t.bound())
			continue
		}
		res := "**MISS**"
		if t.pass(v) {
			res = "PASS"
		}
		p("| %s | %s (%s) | %s | %s |\n", t.what, t.fmtValue(v), detail, t.bound(), res)
	}
	p("\n")
	if x, ok := r.get("BenchmarkCeiling_DurableClaim/procs=8", "x-hello"); ok {
		p("For scale, the first two targets: a program that does only what a durable\n")
		p("claim must (a lock, two fdatasyncs of a journal, a rename, two directory\n")
		p("fsyncs; `Ceiling_DurableClaim` below) reached %s hello-world in this run.\n\n", fmtRatio(x))
	}

	p("## Results\n\n")
	p("* **rate**: claim + complete cycles per second over the whole run, all agents\n")
	p("  together (claims/s); runs/s for process starts and `status`; syncs/s and\n")
	p("  moves/s for the floor.\n")
	p("* **p50, p99**: latency of one claim — one `fencectl claim` process from start\n")
	p("  to exit, or one `Claim` call — not of the cycle.\n")
	p("* **x-floor**: p50 as a multiple of one 4 KiB write + fdatasync on the same\n")
	p("  file system (**floor µs**), measured right before and right after that row:\n")
	p("  the disk's speed drifts by tens of %% over minutes here, so each figure is\n")
	p("  divided by the floor of its own moment. The first row is the floor at the\n")
	p("  start of the run, with more samples.\n")
	p("* **other CPU**: share of the machine's CPU that processes other than the\n")
	p("  benchmark used meanwhile; above a few %% the row is noisy.\n")
	p("* **CPU ms**: CPU (user + system) that the benchmark's own processes used\n")
	p("  per cycle: the test process, every command it started, and the etcd member\n")
	p("  of the etcd rows. **CPU busy**: that CPU over the run's wall time, in %% of\n")
	p("  the machine's %d cores: near 100%% a row is bound by the CPU, and\n", runtime.NumCPU())
	p("  (cores × 1000 / CPU ms) is the most it could reach here; well below,\n")
	p("  it is bound by waiting (a sync, the lock, a round trip).\n\n")
	for i, g := range groups {
		var names []string
		for _, n := range r.order {
			if groupOf(n) == i {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		p("### %s\n\n", g.title)
		p("| Benchmark | rate | p50 ms | p99 ms | x-floor | floor µs | other CPU | CPU ms | CPU busy | What it means |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		for _, n := range names {
			p("| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", strings.TrimPrefix(n, "Benchmark"),
				rate(r, n), num(r, n, "p50-ms"), num(r, n, "p99-ms"), num(r, n, "x-floor"), floorUS(r, n), pct(r, n),
				num(r, n, "cpu-ms/op"), busy(r, n), meaning(r, n))
		}
		p("\n")
	}

	notes := runNotes(r)
	if len(notes) > 0 {
		p("## Notes on this run\n\n")
		for _, n := range notes {
			p("* %s\n", n)
		}
		p("\n")
	}

	p("## Running and comparing\n\n")
	p("`make bench` runs the suite and rewrites this file; the Time row above says\n")
	p("how long it took (most of it building and replaying the 1M-task trees, and\n")
	p("longer when other work shares the cores). Benchmarks never run in\n")
	p("`make test`.\n")
	p("Each benchmark does a fixed batch per iteration and reports per-claim figures,\n")
	p("so run it with `-benchtime 1x`; for a comparison take several samples:\n\n")
	p("```sh\n")
	p("go test -tags urfave_cli_no_docs -run '^$' -bench . -benchtime 1x -count 6 ./bench/ > new.txt\n")
	p("benchstat old.txt new.txt                      # every figure, old against new\n")
	p("benchstat -filter '/procs:8' old.txt new.txt   # only the 8-process rows\n")
	p("BENCH_MAX_TASKS=100000 go test … -bench 'ClaimNext|Status' ./bench/   # skip the 1M tree\n")
	p("```\n")
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func machine(r *results) string {
	parts := []string{orDash(r.config["cpu"]), fmt.Sprintf("%d CPUs", runtime.NumCPU())}
	if mem := memTotal(); mem != "" {
		parts = append(parts, mem+" RAM")
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		parts = append(parts, unix.ByteSliceToString(u.Sysname[:])+" "+unix.ByteSliceToString(u.Release[:])+" "+unix.ByteSliceToString(u.Machine[:]))
	}
	return strings.Join(parts, ", ")
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "MemTotal:" {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				return fmt.Sprintf("%.0f GiB", kb/(1<<20))
			}
		}
	}
	return ""
}

func load(r *results) string {
	var parts []string
	if l := r.config["benchload"]; l != "" {
		parts = append(parts, "load average "+l+" at the start")
	}
	if o := r.config["benchothercpu"]; o != "" {
		parts = append(parts, "other processes used "+o+"% of the CPU during the run")
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, "; ")
}

// ---- table cells

func num(r *results, name, unit string) string {
	v, ok := r.get(name, unit)
	if !ok {
		return "—"
	}
	return fmtNum(v)
}

func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// floorUS is the floor a row was divided by, in µs.
func floorUS(r *results, name string) string {
	if v, ok := r.get(name, "floor-ms"); ok {
		return fmtNum(v * 1000)
	}
	if strings.HasPrefix(name, "BenchmarkFloor_") {
		if v, ok := r.get("BenchmarkFloor_Fdatasync", "p50-ms"); ok {
			return fmtNum(v * 1000)
		}
	}
	return "—"
}

func fmtRatio(v float64) string { return fmtNum(v) + "×" }

func rate(r *results, name string) string {
	for _, unit := range []string{"claims/s", "runs/s", "syncs/s", "moves/s"} {
		if v, ok := r.get(name, unit); ok {
			return fmtNum(v) + " " + unit
		}
	}
	return "—"
}

func pct(r *results, name string) string {
	v, ok := r.get(name, "other-cpu-pct")
	if !ok {
		return "—"
	}
	s := fmt.Sprintf("%.0f%%", v)
	if v > noisy {
		s += " ⚠"
	}
	return s
}

// busy is a row's cpu-busy-pct.
func busy(r *results, name string) string {
	v, ok := r.get(name, "cpu-busy-pct")
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", v)
}

// noisy is the other-CPU share above which a row is marked.
const noisy = 10

// ---- groups and sentences

type group struct {
	title  string
	prefix []string
}

func (g group) match(name string) bool {
	for _, p := range g.prefix {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

var groups = []group{
	{"The floor and the ceiling", []string{"BenchmarkFloor_", "BenchmarkCeiling_"}},
	{"fencectl through the CLI (one process per step)", []string{"BenchmarkCLI_ClaimComplete/", "BenchmarkCLI_ClaimCompleteBboltLock/", "BenchmarkCLI_Claim/"}},
	{"fencectl through the Go API", []string{"BenchmarkLibrary_"}},
	{"Baselines: the patterns people use today", []string{"BenchmarkBaseline"}},
	{"Scale: 1k, 100k and 1M tasks in the journal", []string{"BenchmarkClaimNext/", "BenchmarkCLI_ClaimNext/", "BenchmarkCLI_Status/", "BenchmarkList_Limit100/", "BenchmarkClaimNextLabel/", "BenchmarkPowerLoss_Reconcile/", "BenchmarkCompact_"}},
	{"Work shapes: batches and dependencies", []string{"BenchmarkLibrary_ClaimBatch", "BenchmarkDeps_"}},
	{"Many hosts: the etcd journal beside bbolt", []string{"BenchmarkBackend_"}},
	{"Other", []string{"BenchmarkRun_", "BenchmarkWait_"}},
}

// groupOf is the index of the first group that names n; anything no group
// names goes in the last one (Other).
func groupOf(n string) int {
	for i, g := range groups {
		if g.match(n) {
			return i
		}
	}
	return len(groups) - 1
}

// keys reads the size wrappers of a name: procs=8/tasks=1k → map.
func keys(name string) map[string]string {
	k := map[string]string{}
	for _, part := range strings.Split(name, "/")[1:] {
		if a, b, ok := strings.Cut(part, "="); ok {
			k[a] = b
		}
	}
	return k
}

func plural(n string, one, many string) string {
	if n == "1" {
		return one
	}
	return many
}

func meaning(r *results, name string) string {
	k := keys(name)
	base, _, _ := strings.Cut(name, "/")
	procs := k["procs"]
	switch base {
	case "BenchmarkFloor_Fdatasync":
		return "One 4 KiB write of an allocated block + fdatasync (median of 2000, at the start of the run): the cost of one durable write on this disk. Every x-floor figure divides by the same measurement (400 samples) taken right before and after its own row."
	case "BenchmarkFloor_RenameDirSync":
		return "One rename between two directories + fsync of both: the mirror's move with nothing else; a claim pays one, and a bbolt commit pays about two fdatasyncs."
	case "BenchmarkCeiling_HelloWorld":
		return fmt.Sprintf("A Go hello-world binary started %s, back to back: the most processes per second this machine starts, the ceiling for any one-process-per-claim CLI.", plural(procs, "one at a time", procs+" ways at once"))
	case "BenchmarkCeiling_DurableClaim":
		return fmt.Sprintf("A durable claim with nothing else (`bench/testdata/bareclaim`): a lock, one journal page and one commit record each fdatasynced, a rename and an fsync of both directories; one process per claim, 8 at once, with hello-world run 8 ways right before and after it (%s× hello-world). A CLI whose every claim process makes its own claim durable cannot beat this on this machine.", num(r, name, "x-hello"))
	case "BenchmarkCLI_Claim":
		switch k["build"] {
		case "plain":
			return "The same with a plain `go build` of the full command set (urfave/cli's docs generator linked in), each claim committed in its own process, with hello-world run 8 ways right before and after it."
		case "full":
			return "The same with `fencectl-full`, the full command set as `make build` builds it (`urfave_cli_no_docs`), each claim committed in its own process (a process start, the lock, a commit): what `fencectl` was before the front, with hello-world run 8 ways right before and after it."
		}
		return "Claims alone (no complete), one `fencectl claim` process each, 8 at once, with `make build`'s `fencectl`: the front, which links only what sending a command line needs and sends each claim to the tree's daemon (started by the first), which commits concurrent claims in groups; the daemon's CPU counts as the row's. The figure set against the hello-world ceiling, run 8 ways right before and after it."
	case "BenchmarkCLI_ClaimComplete":
		return fmt.Sprintf("%s looping `fencectl claim` then `fencectl complete` with the release binary: every step is a process start (the front) and a round trip to the tree's daemon, which commits concurrent steps in groups (its CPU counts as the row's).%s",
			plural(procs, "One agent process", procs+" agent processes"), busyNote(r, name))
	case "BenchmarkCLI_ClaimCompleteBboltLock":
		s := fmt.Sprintf("The same with %s and `FENCE_LOCK_MODE=bbolt`, which the daemon does not serve: every step runs in its own process, with no flock on `.fence/lock`, bbolt's own lock polling every 50 ms instead.", plural(procs, "one process", procs+" processes"))
		if v, ok := r.get(name, "lockmode"); ok && v == 0 {
			s += " **The binary ignored the variable: these are flock figures again.**"
		}
		return s + busyNote(r, name)
	case "BenchmarkLibrary_ClaimComplete":
		if k["goroutines"] == "1" {
			return "One claim + complete through the Go API on one goroutine, fully durable: each step takes the lock, commits the journal and fsyncs the move."
		}
		return fmt.Sprintf("%s goroutines sharing one `*fence.Tree`, each claiming and completing: with group commit, many claims share one journal commit and one set of directory syncs, and each caller is answered once its claim is durable.", k["goroutines"])
	case "BenchmarkBaselineRename":
		if k["mode"] == "process" {
			return "The same bare renames, one process per step (a Go helper), 8 at once: a one-process-per-claim tool with nothing in it but the rename."
		}
		return "Bare `mv available/x claimed/x`, then `mv claimed/x done/x`, in one process: no journal, no fsync, no lease, no token — the floor of the unsafe pattern, neither durable nor fenced."
	case "BenchmarkBaselineJSON":
		if k["mode"] == "process" {
			return fmt.Sprintf("flock + one JSON state file of %s tasks, one process per step (a Go helper), 8 at once, as shell agents run it.", k["tasks"])
		}
		return fmt.Sprintf("flock + one JSON state file of %s tasks, in one process: each step reads and decodes every task, sets one, writes a temp file, fsyncs, renames it over the state and fsyncs the directory — durable, O(tasks) per step.", k["tasks"])
	case "BenchmarkClaimNext":
		return fmt.Sprintf("One claim of the next ready task through the Go API with %s ready tasks in the journal (%s + 300 at the start of the batch; the complete after each claim is not timed): a ready-index lookup, so it should not grow with the journal.%s", k["tasks"], k["tasks"], buildNote(r, name))
	case "BenchmarkCLI_ClaimNext":
		return fmt.Sprintf("The same through one `fencectl claim` process, %s ready tasks (+ 300 at the start).", k["tasks"])
	case "BenchmarkList_Limit100":
		return fmt.Sprintf("One page of 100 tasks (`fencectl list --limit 100`, through the Go API) from the first id, with %s tasks in the journal: a seek and a page of records, so it should not grow with the journal.%s", k["tasks"], buildNote(r, name))
	case "BenchmarkClaimNextLabel":
		return fmt.Sprintf("One claim of the next ready task with a label (`claim --label gpu`, Go API) beside %s unlabelled ready tasks (300 labelled ones per batch, added untimed): the label's own ready index, so it should not grow with the journal.%s", k["tasks"], buildNote(r, name))
	case "BenchmarkDeps_FanIn":
		return fmt.Sprintf("The completion of one task that 10k others wait for: one commit records a dep_done per dependent (through the reverse index) and moves all 10k from waiting/ to available/: %s ms, %s µs per dependent.", num(r, name, "ms"), num(r, name, "per-dependent-us"))
	case "BenchmarkCLI_Status":
		return fmt.Sprintf("One `fencectl status` process with %s tasks in the journal: counts are kept per state, not counted.", k["tasks"])
	case "BenchmarkPowerLoss_Reconcile":
		return fmt.Sprintf("The first write after a reboot with %s tasks in the journal, after a power loss took back the renames of %s claims (moves of durable files skip their directory fsyncs): the reconcile reads every record and lists every state directory, moves the %s files back, then the old boot's leases are reaped.", k["tasks"], num(r, name, "files-moved"), num(r, name, "files-moved"))
	case "BenchmarkCompact_BytesPerTask":
		return fmt.Sprintf("The bbolt journal's size per task after %s tasks each lived a full life (add, claim, complete): %s bytes before `fencectl compact`, %s after (the events and claim records folded into the kept records, the file rewritten); compact took %s s.", k["tasks"], num(r, name, "bytes/task-before"), num(r, name, "bytes/task-after"), num(r, name, "compact-s"))
	case "BenchmarkCompact_Replay":
		return fmt.Sprintf("`replay --check` of %s finished tasks (add, claim, complete each), median of 3: %s s before `fencectl compact`, %s s after (folded records are compared byte for byte, no events to fold, a smaller file); after / before = %s.", k["tasks"], num(r, name, "before-s"), num(r, name, "after-s"), num(r, name, "ratio"))
	case "BenchmarkLibrary_ClaimBatch":
		return fmt.Sprintf("100 tasks claimed through the Go API in one batch claim (one transaction, a token each): %s ms, against the same 100 claimed one `Claim` call at a time: %s ms (medians over rounds that alternate); %s× faster.",
			num(r, name, "ms-per-100"), num(r, name, "single-ms-per-100"), num(r, name, "speedup"))
	case "BenchmarkBackend_Library":
		if k["backend"] == "bbolt" {
			return "16 goroutines sharing one `*fence.Tree` on bbolt, claim + complete (group commit): the bbolt side of the etcd rows below, in the same run."
		}
		s := fmt.Sprintf("The same on etcd (one member, over loopback, in another process): 16 goroutines sharing one `*fence.Tree`, so one etcd client and group commit; %s retries per claim (runs again on a fresh snapshot).", num(r, name, "retries/claim"))
		if k["clients"] != "" {
			s = fmt.Sprintf("%s `*fence.Tree`s on one etcd member, one goroutine each: %s etcd clients whose claims race; per claim, %s runs again on a fresh snapshot and %s at once on a moved head (`P/m/head`, which every write rewrites: the loser runs again on what it read, with the new head, and only its commit is a request).", k["clients"], k["clients"], num(r, name, "retries/claim"), num(r, name, "rebases/claim"))
		}
		if v, ok := r.get(name, "timeouts"); ok && v > 0 {
			s += fmt.Sprintf(" **%s claims lost every race for the store's whole timeout (10 s) and failed** as if etcd did not answer; they were run again.", fmtNum(v))
		}
		return s
	case "BenchmarkBackend_CLI":
		switch {
		case k["backend"] == "bbolt":
			return "8 agent processes looping `fencectl claim` then `fencectl complete` on a bbolt tree (each step sent by the front to the tree's daemon): the bbolt side of the etcd rows below, in the same run."
		case k["bin"] == "fencectl-etcd":
			return "The same on an etcd tree calling `fencectl-etcd`, the binary that links the etcd client: each step still pays that client's start-up, then goes to the host's daemon for the tree (`fencectl daemon`, started by the first step), which keeps one etcd connection and commits concurrent steps in groups. The daemon's CPU counts as the row's."
		}
		return "The same on an etcd tree through `fencectl`, as agents call it: the front reads `.fence/journal.json` and sends the step to the host's daemon for the tree (`fencectl-etcd daemon`, started by the first step: one etcd connection, concurrent steps committed in groups). The daemon's CPU counts as the row's."
	case "BenchmarkBackend_Start":
		return fmt.Sprintf("`fencectl-full status` on a bbolt tree, one process at a time, alternating with `fencectl-etcd` (the same with etcd linked): %s ms and %s ms of CPU (median) for `fencectl-full`, %s ms and %s ms of CPU for `fencectl-etcd`, %s ms more. This is why `fencectl-full` does not link etcd.",
			num(r, name, "p50-ms"), num(r, name, "cpu-ms"), num(r, name, "etcd-bin-p50-ms"), num(r, name, "etcd-bin-cpu-ms"), num(r, name, "etcd-bin-extra-ms"))
	case "BenchmarkBackend_HandOffCheck":
		return "What `fencectl-full` does for etcd on a bbolt tree: before each command it looks for `.fence/journal.json` (`fence.TreeJournal`, tree `.`) to know whether to hand the tree to `fencectl-etcd`; the file is missing. Median of one check in the process: the whole start-up difference between `fencectl-full` and a build without etcd code."
	case "BenchmarkRun_RevokeToSignal":
		s := fmt.Sprintf("`fencectl run` sending SIGTERM to its command after an operator's `revoke`: %s ms from the revoke process's start, %s ms from its return (median).",
			num(r, name, "ms-from-revoke-start"), num(r, name, "ms-from-revoke-return"))
		if v, ok := r.get(name, "ms-from-revoke-return"); ok && v < 0 {
			s += " Negative: the signal arrived before the revoke process had exited."
		}
		return s
	case "BenchmarkRun_Loop":
		if k["runners"] == "1" {
			return fmt.Sprintf("`fencectl run --loop -- true` working through a tree alone: one process, no start-up per task; each task's completion and the next claim are one commit (2 fdatasyncs a task, no directory fsync: a rename lost to a power cut is redone from the journal), which runs beside the next task's command while a core is spare (one task kept in hand). Right before it, on a tree of the same kind, one agent looping over `claim` + `complete` processes as a shell loop does: %s cycles/s, so run --loop is %s× that. %s ms of CPU a task (run, its commands and guard).",
				num(r, name, "shell-cycles/s"), num(r, name, "x-shell"), num(r, name, "cpu-ms"))
		}
		if k["jobs"] != "" {
			return fmt.Sprintf("One `fencectl run --loop --jobs %s -- true` process on one tree: %s loops side by side, each task under its own lease and its own cgroup (or PID namespace); their completions and claims share group commits, so several tasks pay one commit's syncs. %s ms of CPU a task.",
				k["jobs"], k["jobs"], num(r, name, "cpu-ms"))
		}
		return fmt.Sprintf("%s `fencectl run --loop -- true` processes on one tree: tasks completed per second, all together; %s ms of CPU a task. Each process commits its own groups, one at a time under the tree's lock: every task still pays its commit's syncs in turn.",
			k["runners"], num(r, name, "cpu-ms"))
	case "BenchmarkRun_KillToClaimable":
		return fmt.Sprintf("Instant death detection: from SIGKILL of `fencectl run` (lease TTL 10 minutes, a tree without retry backoff) to another agent's `fencectl claim` of its task returning success, %d kills: %s ms median, %s ms at most (%s claim processes per kill). Target: under 50 ms at the median.",
			deathSamples, num(r, name, "ms-p50-kill-to-claimable"), num(r, name, "ms-max-kill-to-claimable"), num(r, name, "claims-tried"))
	}
	return "—"
}

// deathSamples is BenchmarkRun_KillToClaimable's kills per iteration.
const deathSamples = 50

func busyNote(r *results, name string) string {
	if v, ok := r.get(name, "busy-retries"); ok && v > 0 {
		return fmt.Sprintf(" %s commands exited busy (lock not obtained in 10 s) and were run again.", fmtNum(v))
	}
	return ""
}

func buildNote(r *results, name string) string {
	if v, ok := r.get(name, "build-s"); ok {
		return fmt.Sprintf(" Building the tree took %s s (not timed).", fmtNum(v))
	}
	return ""
}

// ---- targets

type target struct {
	what    string
	atLeast bool // true: measured ≥ limit; false: measured ≤ limit
	limit   float64
	measure func(r *results) (v float64, detail string, ok bool)
	unit    string // "" for a ratio (×); else the unit of an absolute figure
}

// fmtValue renders a measured value of t: a ratio, or a figure and its unit.
func (t target) fmtValue(v float64) string {
	if t.unit == "" {
		return fmtRatio(v)
	}
	return fmtNum(v) + " " + t.unit
}

func (t target) pass(v float64) bool {
	if t.atLeast {
		return v >= t.limit
	}
	return v <= t.limit
}

func (t target) bound() string {
	lim := strconv.FormatFloat(t.limit, 'f', -1, 64) + "×"
	if t.unit != "" {
		lim = strconv.FormatFloat(t.limit, 'f', -1, 64) + " " + t.unit
	}
	if t.atLeast {
		return "≥ " + lim
	}
	return "≤ " + lim
}

// ratio is a/b of two benchmark figures, with the figures as the detail.
func ratio(na, ua, nb, ub string) func(r *results) (float64, string, bool) {
	return func(r *results) (float64, string, bool) {
		a, okA := r.get("Benchmark"+na, ua)
		b, okB := r.get("Benchmark"+nb, ub)
		switch {
		case !okA:
			return 0, "no " + na, false
		case !okB:
			return 0, "no " + nb, false
		case b == 0:
			return 0, nb + " is 0", false
		}
		return a / b, fmt.Sprintf("%s %s / %s %s", fmtNum(a), ua, fmtNum(b), ub), true
	}
}

// vsHello is a CLI_Claim row's x-hello: its claims/s over the hello-world
// rate measured right before and after it; without x-hello, the ratio to
// the Ceiling_HelloWorld/procs=8 row.
func vsHello(name string) func(r *results) (float64, string, bool) {
	return func(r *results) (float64, string, bool) {
		x, ok := r.get("Benchmark"+name, "x-hello")
		h, okH := r.get("Benchmark"+name, "hello-runs/s")
		c, okC := r.get("Benchmark"+name, "claims/s")
		if !ok || !okH || !okC {
			return ratio(name, "claims/s", "Ceiling_HelloWorld/procs=8", "runs/s")(r)
		}
		detail := fmt.Sprintf("%s claims/s / %s hello runs/s, measured around it", fmtNum(c), fmtNum(h))
		cc, okCC := r.get("Benchmark"+name, "cpu-ms/op")
		hc, okHC := r.get("Benchmark"+name, "hello-cpu-ms")
		if okCC && okHC {
			detail += fmt.Sprintf("; CPU per process: %s ms a claim, %s ms hello-world", fmtNum(cc), fmtNum(hc))
		}
		return x, detail, true
	}
}

// withCPU adds to f's detail the CPU per cycle of the rows names (each
// row's cpu-ms/op and cpu-busy-pct, where measured): whether a row that
// misses its target is bound by the CPU or by waiting.
func withCPU(f func(r *results) (float64, string, bool), names ...string) func(r *results) (float64, string, bool) {
	return func(r *results) (float64, string, bool) {
		v, detail, ok := f(r)
		var parts []string
		for _, n := range names {
			c, okC := r.get("Benchmark"+n, "cpu-ms/op")
			b, okB := r.get("Benchmark"+n, "cpu-busy-pct")
			if okC && okB {
				parts = append(parts, fmt.Sprintf("%s: %s ms, CPU %.0f%% busy", n, fmtNum(c), b))
			}
		}
		if len(parts) > 0 {
			detail += "; CPU per cycle: " + strings.Join(parts, "; ")
		}
		return v, detail, ok
	}
}

// floorRatio compares two rows by their x-floor (p50 over the fdatasync
// floor measured around each), so that a disk that slowed down between
// them does not count as the journal scaling badly: the 1M rows run after
// the 1M-task tree is built, and the floor measured around them was up to
// 1.5x the one around the 1k rows of the same run. Without x-floor on
// both, it falls back to the p50 ratio.
func floorRatio(na, nb string) func(r *results) (float64, string, bool) {
	return func(r *results) (float64, string, bool) {
		xa, okA := r.get("Benchmark"+na, "x-floor")
		xb, okB := r.get("Benchmark"+nb, "x-floor")
		pa, _ := r.get("Benchmark"+na, "p50-ms")
		pb, _ := r.get("Benchmark"+nb, "p50-ms")
		fa, okFA := r.get("Benchmark"+na, "floor-ms")
		fb, okFB := r.get("Benchmark"+nb, "floor-ms")
		if !okA || !okB || !okFA || !okFB || xb == 0 {
			return ratio(na, "p50-ms", nb, "p50-ms")(r)
		}
		return xa / xb, fmt.Sprintf("%s ms at a %s µs floor / %s ms at a %s µs floor", fmtNum(pa), fmtNum(fa*1000), fmtNum(pb), fmtNum(fb*1000)), true
	}
}

// xFloor is a row's x-floor: its p50 over the floor measured around it.
func xFloor(name string) func(r *results) (float64, string, bool) {
	return func(r *results) (float64, string, bool) {
		x, ok := r.get("Benchmark"+name, "x-floor")
		p50, okP := r.get("Benchmark"+name, "p50-ms")
		f, okF := r.get("Benchmark"+name, "floor-ms")
		if !ok || !okP || !okF {
			return ratio(name, "p50-ms", "Floor_Fdatasync", "p50-ms")(r)
		}
		return x, fmt.Sprintf("%s ms p50 / %s µs floor, measured around it", fmtNum(p50), fmtNum(f*1000)), true
	}
}

var targets = []target{
	{"replay --check at 1M finished tasks after compact vs before", false, 0.3,
		ratio("Compact_Replay/tasks=1M", "after-s", "Compact_Replay/tasks=1M", "before-s"), ""},
	{"CLI claims at 8 processes vs hello-world 8 ways, `make build` binary", true, 0.6,
		vsHello("CLI_Claim/build=release/procs=8"), ""},
	{"CLI claims at 8 processes vs hello-world 8 ways, `fencectl-full` (each claim committed in its own process)", true, 0.5,
		vsHello("CLI_Claim/build=full/procs=8"), ""},
	{"CLI claims at 8 processes vs hello-world 8 ways, plain `go build` of the full command set", true, 0.5,
		vsHello("CLI_Claim/build=plain/procs=8"), ""},
	{"CLI claim + complete at 8 processes vs JSON state one process per step, 100k tasks", true, 50,
		ratio("CLI_ClaimComplete/procs=8", "claims/s", "BaselineJSON/mode=process/procs=8/tasks=100k", "claims/s"), ""},
	{"Library (1 goroutine) vs JSON state in-process, 1k tasks", true, 3,
		ratio("Library_ClaimComplete/goroutines=1", "claims/s", "BaselineJSON/mode=inproc/procs=1/tasks=1k", "claims/s"), ""},
	{"Library (1 goroutine) vs JSON state in-process, 100k tasks", true, 100,
		ratio("Library_ClaimComplete/goroutines=1", "claims/s", "BaselineJSON/mode=inproc/procs=1/tasks=100k", "claims/s"), ""},
	{"CLI claims at 8 processes vs the bare durable claim 8 ways (lock, 2 fdatasyncs, rename, 2 directory fsyncs)", true, 1,
		withCPU(ratio("CLI_Claim/build=release/procs=8", "claims/s", "Ceiling_DurableClaim/procs=8", "claims/s"), "CLI_Claim/build=release/procs=8", "Ceiling_DurableClaim/procs=8"), ""},
	{"p99 / p50 of a claim at 8 CLI processes", false, 3,
		ratio("CLI_ClaimComplete/procs=8", "p99-ms", "CLI_ClaimComplete/procs=8", "p50-ms"), ""},
	{"p99 / p50 of a claim at 16 CLI processes", false, 3,
		ratio("CLI_ClaimComplete/procs=16", "p99-ms", "CLI_ClaimComplete/procs=16", "p50-ms"), ""},
	{"Claim-next p50 at 1M tasks vs 1k (Go API), each over the disk's floor of its moment", false, 1.5,
		floorRatio("ClaimNext/tasks=1M", "ClaimNext/tasks=1k"), ""},
	{"Claim-next p50 at 1M tasks vs 1k (CLI), each over the disk's floor of its moment", false, 1.5,
		floorRatio("CLI_ClaimNext/tasks=1M", "CLI_ClaimNext/tasks=1k"), ""},
	{"list --limit 100 p50 at 1M tasks vs 1k (Go API)", false, 1.5,
		ratio("List_Limit100/tasks=1M", "p50-ms", "List_Limit100/tasks=1k", "p50-ms"), ""},
	{"Claim-next with a label p50 at 1M tasks vs 1k (Go API), each over the disk's floor of its moment", false, 1.5,
		floorRatio("ClaimNextLabel/tasks=1M", "ClaimNextLabel/tasks=1k"), ""},
	{"Library claim p50 (1 goroutine) vs the fdatasync floor", false, 6, xFloor("Library_ClaimComplete/goroutines=1"), ""},
	{"Library claims/s, 16 goroutines vs 1", true, 5,
		ratio("Library_ClaimComplete/goroutines=16", "claims/s", "Library_ClaimComplete/goroutines=1", "claims/s"), ""},
	{"etcd: library claims/s, 16 goroutines on one member (one Tree, group commit)", true, 5000,
		withCPU(figure("Backend_Library/backend=etcd/goroutines=16", "claims/s", "bbolt in the same run: %s claims/s", "Backend_Library/backend=bbolt/goroutines=16"), "Backend_Library/backend=etcd/goroutines=16"), "claims/s"},
	{"etcd: CLI claim + complete at 8 processes (`fencectl`, as agents call it: steps through the host's daemon) vs bbolt in the same run", true, 0.5,
		withCPU(ratio("Backend_CLI/backend=etcd/bin=fencectl/procs=8", "claims/s", "Backend_CLI/backend=bbolt/procs=8", "claims/s"), "Backend_CLI/backend=etcd/bin=fencectl/procs=8", "Backend_CLI/backend=bbolt/procs=8"), ""},
	{"`run --loop -- true`, 1 runner, vs a loop of `claim` + `complete` processes, 1 agent, same run", true, 5,
		loopVsShell("Run_Loop/runners=1"), ""},
	{"`run --loop -- true`, 8 runner processes on one tree", true, 1000,
		withCPU(figure("Run_Loop/runners=8", "claims/s", "1 runner in the same run: %s tasks/s", "Run_Loop/runners=1"), "Run_Loop/runners=8", "Run_Loop/runners=1"), "tasks/s"},
	{"`run --loop --jobs 8 -- true`, 8 runners in one process on one tree", true, 1000,
		withCPU(figure("Run_Loop/jobs=8", "claims/s", "8 runner processes in the same run: %s tasks/s", "Run_Loop/runners=8"), "Run_Loop/jobs=8", "Run_Loop/runners=8"), "tasks/s"},
	{"etcd: what plain `fencectl` adds to a bbolt tree's start (the hand-off check)", false, 0.2,
		figure("Backend_HandOffCheck", "p50-ms", "`fencectl-etcd` would add %s ms", "Backend_Start", "etcd-bin-extra-ms"), "ms"},
}

// loopVsShell is a Run_Loop row's x-shell: its tasks/s over the rate of
// the claim + complete process loop run right before it.
func loopVsShell(name string) func(r *results) (float64, string, bool) {
	return func(r *results) (float64, string, bool) {
		x, ok := r.get("Benchmark"+name, "x-shell")
		c, okC := r.get("Benchmark"+name, "claims/s")
		sh, okS := r.get("Benchmark"+name, "shell-cycles/s")
		if !ok || !okC || !okS {
			return 0, "no " + name, false
		}
		return x, fmt.Sprintf("%s tasks/s / %s claim + complete cycles/s, measured right before it", fmtNum(c), fmtNum(sh)), true
	}
}

// figure is one benchmark's figure as an absolute target, with another
// row's figure (its rate, or unit alongUnit) in the detail.
func figure(name, unit, detail, along string, alongUnit ...string) func(r *results) (float64, string, bool) {
	return func(r *results) (float64, string, bool) {
		v, ok := r.get("Benchmark"+name, unit)
		if !ok {
			return 0, "no " + name, false
		}
		var a float64
		var okA bool
		if len(alongUnit) > 0 {
			a, okA = r.get("Benchmark"+along, alongUnit[0])
		} else {
			a, okA = r.get("Benchmark"+along, unit)
		}
		if !okA {
			return v, name, true
		}
		return v, fmt.Sprintf(detail, fmtNum(a)), true
	}
}

// ---- notes

func runNotes(r *results) []string {
	var notes []string
	for _, f := range r.failures {
		notes = append(notes, "**Failed:** "+f)
	}
	if !r.ok && len(r.failures) == 0 {
		notes = append(notes, "**go test did not report ok**: the run was cut short; rows may be missing.")
	}
	for _, n := range r.order {
		if v, ok := r.get(n, "lockmode"); ok && v == 0 {
			notes = append(notes, "`FENCE_LOCK_MODE=bbolt` was not honoured by the binary of this run (a `status` under it still waited for `.fence/lock`), so the BboltLock rows measure the flock path again.")
			break
		}
	}
	for _, n := range r.order {
		if strings.HasPrefix(n, "BenchmarkClaimNext/tasks=1M") {
			if v, ok := r.get(n, "build-s"); ok {
				notes = append(notes, fmt.Sprintf("The 1M-task tree (empty files written into `available/`, adopted by one `replay` commit) took %s s to build; it is built once and shared by the scale rows, outside the timed part.", fmtNum(v)))
			}
		}
	}
	var loud []string
	for _, n := range r.order {
		if v, ok := r.get(n, "other-cpu-pct"); ok && v > noisy {
			loud = append(loud, fmt.Sprintf("`%s` (%.0f%%)", strings.TrimPrefix(n, "Benchmark"), v))
		}
	}
	if v, err := strconv.ParseFloat(r.config["benchothercpu"], 64); err == nil && v > noisy {
		loud = nil // the warning at the top says it for the whole run
	}
	if len(loud) > 0 {
		notes = append(notes, "Other processes used a noticeable share of the CPU during "+strings.Join(loud, ", ")+": on a 2-core machine those rows understate fencectl (and the baselines alike); run again on a quiet machine before drawing a conclusion from them.")
	}
	return notes
}
