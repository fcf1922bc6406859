package torture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal"
	etcdstore "github.com/fencectl/fencectl/journal/etcd"
)

// fencectlBin is the real fencectl binary every test runs (see TestMain).
// Beside it is fencectl-etcd, the same built with the etcd backend: the
// plain binary hands every command on an etcd tree to it, as an installed
// fencectl does, so the etcd rows of the backends table test that hand-off
// too.
var fencectlBin string

// TestMain builds cmd/fencectl once into a temporary directory, with the
// build tags and the race detector of this test binary: `go test -tags
// fencetest` tests a binary with the test hooks, a plain `go test` one
// without them, and `make test-race` a race-built one, as before the suite
// left package main, where the test binary ran itself as fencectl. It
// builds fencectl-etcd beside it with the etcd tag added.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencectl-torture")
	if err != nil {
		fmt.Fprintln(os.Stderr, "torture set-up:", err)
		os.Exit(1)
	}
	fencectlBin = filepath.Join(dir, "fencectl")
	code := 1
	if err := buildFencectl(fencectlBin, ""); err != nil {
		fmt.Fprintln(os.Stderr, "torture set-up:", err)
	} else if err := buildFencectl(filepath.Join(dir, "fencectl-etcd"), "etcd"); err != nil {
		fmt.Fprintln(os.Stderr, "torture set-up:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildFencectl builds cmd/fencectl to out with this test binary's -tags
// (and the tag extra, if any) and -race (read from its build information).
func buildFencectl(out, extra string) error {
	args := []string{"build", "-o", out}
	tags := extra
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "-tags" && s.Value != "":
				tags = strings.Trim(s.Value+","+extra, ",")
			case s.Key == "-race" && s.Value == "true":
				args = append(args, "-race")
			}
		}
	}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, "github.com/fencectl/fencectl/cmd/fencectl")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// raceBuild reports whether this test binary, and so the fencectl it
// built, runs under the race detector.
func raceBuild() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return true
			}
		}
	}
	return false
}

// tortBackend is a journal store the torture parts run on.
type tortBackend struct {
	name string
	// start readies the store for one tree of t and returns the
	// environment of that tree's init; later commands find the journal
	// from the tree. For etcd: a one-member cluster in this process, and
	// FENCE_JOURNAL naming it.
	start func(t *testing.T) []string
	// expire ends the leases of the tasks ids of the tree at dir now, on
	// the store's own clock: nil for bbolt, which judges expiry by the
	// hosts' clock (the test clock moves past the leases instead); on
	// etcd, whose clock no test can wind forward, an etcd lease revoked
	// is one that ran out.
	expire func(t testing.TB, dir string, ids []string)
	// crashLeaves are the kinds of replay finding that writers killed
	// mid-step may leave for replay: on bbolt the moves of the last
	// commit, which the next writer finishes; on etcd, where no writer
	// sweeps .fence/tmp, also what dead writers staged.
	crashLeaves []string
	// smallPct scales the parts' small (make test) sizes: an etcd step is
	// a few round trips to the cluster and reruns on conflict.
	smallPct int
}

// size is tortureScale with the small size scaled for b.
func (b tortBackend) size(small, full int) int {
	if tortureFull() {
		return tortureScale(small, full)
	}
	return max(1, small*b.smallPct/100)
}

// backends are the journal stores the parts that hold on both run on,
// each part from this one table.
var backends = []tortBackend{
	{name: "bolt", start: func(*testing.T) []string { return nil }, crashLeaves: []string{"misplaced"}, smallPct: 100},
	{name: "etcd", start: func(t *testing.T) []string {
		return []string{"FENCE_JOURNAL=etcd://" + clitest.Etcd(t) + "/torture"}
	}, expire: etcdExpire, crashLeaves: []string{"misplaced", "orphan_staged"}, smallPct: 40},
}

// part names a torture part in the report for backend b: bbolt's keeps
// the name it had before etcd (docs/RELIABILITY.md's rows stay put).
func (b tortBackend) part(name string) string {
	if b.name == "bolt" {
		return name
	}
	return name + "_" + b.name
}

// etcdExpire ends the etcd leases of ids' claims in the etcd tree at dir
// as etcd does when a TTL runs out (their liveness keys go: leases are
// shared by the claims of one second, so none is revoked), through a
// client of the test's own (another host, as it were).
func etcdExpire(t testing.TB, dir string, ids []string) {
	t.Helper()
	cfg, found, err := fence.TreeJournal(dir)
	if err != nil || !found {
		t.Fatalf("%s is not an etcd tree: %v", dir, err)
	}
	b, err := etcdstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := b.Open(filepath.Join(dir, ".fence"), journal.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range ids {
		if err := s.(*etcdstore.Store).ExpireLease(id); err != nil {
			t.Fatalf("expire the lease of %s: %v", id, err)
		}
	}
}

// fencectlCmd runs fencectl (fencectlBin) on the tree dir in its own process.
func fencectlCmd(dir string, args ...string) *exec.Cmd {
	return clitest.Binary{Path: fencectlBin}.Command(dir, args...)
}

// ---- the report of make torture ----

// tortureFull reports whether this is the full run (make torture).
func tortureFull() bool { return os.Getenv("FENCE_TORTURE") == "full" }

// tortureScale picks the size of a torture part: small in make test, full
// in make torture. FENCE_TORTURE_SCALE=N (a percentage) scales the full
// size for quick experiments.
func tortureScale(small, full int) int {
	if !tortureFull() {
		return small
	}
	if p, err := strconv.Atoi(os.Getenv("FENCE_TORTURE_SCALE")); err == nil && p > 0 {
		return max(small, full*p/100)
	}
	return full
}

var reportMu sync.Mutex

// tortureReport records the figures of one torture part. Metric values are
// numbers or short strings; "ok" (bool) says whether the part's checks
// passed. Without FENCE_TORTURE_REPORT it only logs them.
func tortureReport(t testing.TB, part string, metrics map[string]any) {
	t.Helper()
	metrics["part"] = part
	metrics["ok"] = !t.Failed()
	metrics["at"] = time.Now().UTC().Format(time.RFC3339)
	b, err := json.Marshal(metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("torture report: %s", b)
	path := os.Getenv("FENCE_TORTURE_REPORT")
	if path == "" {
		return
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// ---- reading a tree: its log, its directories, replay --check ----

// tortCmd makes a fencectl command for one tree (fencectlCmd, or runTree.Cmd
// with its test clock).
type tortCmd func(args ...string) *exec.Cmd

// tortEvent is one line of `log --json`.
type tortEvent struct {
	Seq    uint64 `json:"seq"`
	Time   string `json:"time"`
	Type   string `json:"type"`
	Task   string `json:"task"`
	From   string `json:"from"`
	To     string `json:"to"`
	Agent  string `json:"agent"`
	Token  uint64 `json:"token"`
	Reason string `json:"reason"`
}

// tortLog returns the whole event log, heartbeats included.
func tortLog(t testing.TB, mk tortCmd) []tortEvent {
	t.Helper()
	c := mk("log", "--json", "--heartbeats")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("log --json: %v\n%s", err, stderr.Bytes())
	}
	var evs []tortEvent
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev tortEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("log line %q: %v", sc.Bytes(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// tortFinding is one entry of `replay --json` findings.
type tortFinding struct {
	Kind   string `json:"kind"`
	Task   string `json:"task"`
	Dir    string `json:"dir"`
	Detail string `json:"detail"`
	Fixed  bool   `json:"fixed"`
}

// tortReplay runs `replay [--check] --json` and returns its exit code, the
// findings and the raw output (for failure messages).
func tortReplay(t testing.TB, mk tortCmd, check bool) (int, []tortFinding, string) {
	t.Helper()
	args := []string{"replay", "--json"}
	if check {
		args = append(args, "--check")
	}
	c := mk(args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	code := clitest.ExitCode(c.Run())
	var rep struct {
		Findings []tortFinding `json:"findings"`
	}
	if code == 0 || code == clitest.ExitDrift {
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("replay output %q: %v", stdout.Bytes(), err)
		}
	}
	return code, rep.Findings, stdout.String() + stderr.String()
}

// tortCheckClean fails unless `replay --check` exits 0 with no findings
// (which includes bbolt's own consistency check, as bbolt_check findings).
func tortCheckClean(t testing.TB, mk tortCmd, when string) {
	t.Helper()
	if code, fs, out := tortReplay(t, mk, true); code != 0 || len(fs) != 0 {
		t.Errorf("%s: replay --check exit %d with %d findings, want 0 and none:\n%s", when, code, len(fs), out)
	}
}

// tortStateDirs are the directories a task file can be in.
var tortStateDirs = []string{"waiting", "available", "claimed", "done", "failed"}

// tortFiles lists where each task file is: id → directories.
func tortFiles(t testing.TB, root string) map[string][]string {
	t.Helper()
	where := map[string][]string{}
	for _, d := range tortStateDirs {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			where[e.Name()] = append(where[e.Name()], d)
		}
	}
	return where
}

// tortDirLen is the number of entries in root/sub (-1 if it cannot be read).
func tortDirLen(root, sub string) int {
	entries, err := os.ReadDir(filepath.Join(root, sub))
	if err != nil {
		return -1
	}
	return len(entries)
}

// tortStates folds the log into each task's state (the last event's
// destination).
func tortStates(evs []tortEvent) map[string]string {
	st := map[string]string{}
	for _, ev := range evs {
		st[ev.Task] = ev.To
	}
	return st
}

// tortAudit compares the directories with the journal's states: every task
// the journal knows has exactly one file, in its state's directory, and no
// other file is in a state directory. It returns one line per problem, and
// the number of lost and duplicated tasks.
func tortAudit(t testing.TB, root string, states map[string]string) (problems []string, lost, dups int) {
	t.Helper()
	where := tortFiles(t, root)
	ids := make([]string, 0, len(states))
	for id := range states {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		dirs := where[id]
		switch {
		case len(dirs) == 0:
			lost++
			problems = append(problems, fmt.Sprintf("task %s (%s in the journal) has no file in any state directory", id, states[id]))
		case len(dirs) > 1:
			dups++
			problems = append(problems, fmt.Sprintf("task %s has files in %v", id, dirs))
		case dirs[0] != states[id]:
			problems = append(problems, fmt.Sprintf("task %s is in %s/, the journal says %s", id, dirs[0], states[id]))
		}
	}
	for id, dirs := range where {
		if _, ok := states[id]; !ok {
			problems = append(problems, fmt.Sprintf("%s/%s is a file the journal does not know", dirs[0], id))
		}
	}
	return problems, lost, dups
}

// tortFencing walks the event log as a fencing register per task:
// claim tokens strictly increase across the whole log; a claim happens
// only on a task nobody holds; every fenced event (heartbeat, put,
// complete, release, fail) carries the token of the claim in force; and
// complete happens at most once per task unless it was requeued. It
// returns the violations and the number of tasks completed twice.
func tortFencing(evs []tortEvent) (problems []string, doubleCompletions int) {
	var lastClaim uint64
	holder := map[string]uint64{}
	completed := map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case "claim":
			if ev.Token <= lastClaim {
				problems = append(problems, fmt.Sprintf("seq %d: claim token %d of %s does not exceed the previous claim token %d", ev.Seq, ev.Token, ev.Task, lastClaim))
			}
			lastClaim = max(lastClaim, ev.Token)
			if h := holder[ev.Task]; h != 0 {
				problems = append(problems, fmt.Sprintf("seq %d: %s claimed with token %d while token %d still held it", ev.Seq, ev.Task, ev.Token, h))
			}
			holder[ev.Task] = ev.Token
		case "heartbeat", "put":
			if h := holder[ev.Task]; h != ev.Token {
				problems = append(problems, fmt.Sprintf("seq %d: %s of %s accepted with token %d, the holder's is %d", ev.Seq, ev.Type, ev.Task, ev.Token, h))
			}
		case "complete", "release", "fail":
			if h := holder[ev.Task]; h != ev.Token {
				problems = append(problems, fmt.Sprintf("seq %d: %s of %s accepted with token %d, the holder's is %d", ev.Seq, ev.Type, ev.Task, ev.Token, h))
			}
			delete(holder, ev.Task)
			if ev.Type == "complete" {
				completed[ev.Task]++
				if completed[ev.Task] == 2 {
					doubleCompletions++
					problems = append(problems, fmt.Sprintf("seq %d: %s completed a second time (token %d)", ev.Seq, ev.Task, ev.Token))
				}
			}
		case "reap", "revoke":
			if holder[ev.Task] == 0 {
				problems = append(problems, fmt.Sprintf("seq %d: %s of %s, which nobody held", ev.Seq, ev.Type, ev.Task))
			}
			delete(holder, ev.Task)
		case "requeue":
			completed[ev.Task] = 0
		}
	}
	return problems, doubleCompletions
}

// tortClaim claims id with a long lease and returns the token.
func tortClaim(rt *runTree, id string, ttl string) string {
	rt.T.Helper()
	var c struct {
		Token uint64 `json:"token"`
	}
	out := rt.OK("claim", id, "--json", "--ttl", ttl, "--agent", "holder")
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Token == 0 {
		rt.T.Fatalf("claim %s: %q: %v", id, out, err)
	}
	return fmt.Sprint(c.Token)
}

func tortWrite(t testing.TB, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// tortSnapshot is what a failed command must not change.
type tortSnapshot struct {
	events int
	states map[string]string
	files  map[string][]string
	staged int
	outs   []string
}

func tortSnapshotOf(t *testing.T, mk tortCmd, dir string) tortSnapshot {
	t.Helper()
	evs := tortLog(t, mk)
	var outs []string
	filepath.WalkDir(filepath.Join(dir, "out"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			outs = append(outs, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	return tortSnapshot{events: len(evs), states: tortStates(evs), files: tortFiles(t, dir), staged: max(tortDirLen(dir, ".fence/tmp"), 0), outs: outs}
}

func (a tortSnapshot) diff(b tortSnapshot) string {
	var d []string
	if a.events != b.events {
		d = append(d, fmt.Sprintf("events %d → %d", a.events, b.events))
	}
	if fmt.Sprint(a.states) != fmt.Sprint(b.states) {
		d = append(d, fmt.Sprintf("journal states %v → %v", a.states, b.states))
	}
	if fmt.Sprint(a.files) != fmt.Sprint(b.files) {
		d = append(d, fmt.Sprintf("files %v → %v", a.files, b.files))
	}
	if a.staged != b.staged {
		d = append(d, fmt.Sprintf(".fence/tmp entries %d → %d", a.staged, b.staged))
	}
	if fmt.Sprint(a.outs) != fmt.Sprint(b.outs) {
		d = append(d, fmt.Sprintf("outputs %v → %v", a.outs, b.outs))
	}
	return strings.Join(d, "; ")
}

// tortWaitFor polls cond (an observation of an event the test caused, such as a
// process entering a state) until it holds, failing after a bound.
func tortWaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ---- a tree on the test clock, and fencectl run ----

// runTree is a tree on a test clock driven through fencectlBin; the one
// cmd/fencectl's tests use too (clitest.RunTree).
type runTree = clitest.RunTree

func newRunTree(t *testing.T) *runTree {
	return clitest.NewRunTree(t, clitest.Binary{Path: fencectlBin})
}
