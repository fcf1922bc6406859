//go:build fencetest

package torture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// Torture part 1b, crash points: every named crash point of the test build
// (each op's after-commit, the move between rename and directory fsyncs in
// each op, in adoption, in settling and in replay, the middle of adoption
// and of replay) is hit by one real command, which exits 99 there. Then the
// next writer, or `replay`, must bring the tree in line with the journal:
// `replay --check` clean, every task where the journal says, nothing lost,
// no second copy, fenced outputs published, and the tree keeps working.

// crashCase is one crash: a tree set up, one command that crashes at a
// point, and what the journal must say afterwards.
type crashCase struct {
	name  string
	point string // FENCE_CRASH
	after int    // FENCE_CRASH_AFTER: crash at the Nth hit (0: the first)
	// setup prepares the tree and returns the command that will crash.
	setup func(rt *runTree) []string
	// want is each task's state in the journal right after the crash (the
	// commit before the crash point is durable).
	want map[string]string
	// final is each task's state after recovery, where it differs from want
	// (replay adopts files the crashed replay had not reached yet).
	final map[string]string
	// pending: the crash left moves undone, so `replay --check` must find
	// drift before recovery (crashPendingNo: it must find none; crashPendingAny:
	// either, where it depends on whether the commit's moves are synced one
	// by one or as a batch).
	pending crashPending
	// content is each task file's content after recovery; outputs each
	// out/<task>/<name> file's ("" means it must not exist before recovery
	// either way; checked only after).
	content map[string]string
	outputs map[string]string
	// unpublished: out/<task>/<name> files that must not exist before
	// recovery (the crash came before their publication).
	unpublished []string
	// then, if set, runs after recovery: what the crashed command's caller
	// does next (a retry with the same token or request id).
	then func(t *testing.T, rt *runTree, args []string)
	// replayOnly: the damage is not a writer's last commit (a replay cut
	// short while repairing a hand-damaged tree): only `replay` finishes it.
	replayOnly bool
}

type crashPending int

const (
	crashPendingNo crashPending = iota
	crashPendingYes
	crashPendingAny
)

// crashCmd runs fencectl with a crash point and returns its exit code and
// output.
func crashCmd(rt *runTree, point string, after int, args ...string) (int, string) {
	c := rt.Cmd(args...)
	c.Env = append(c.Env, "FENCE_CRASH="+point)
	if after > 0 {
		c.Env = append(c.Env, fmt.Sprintf("FENCE_CRASH_AFTER=%d", after))
	}
	out, err := c.CombinedOutput()
	return clitest.ExitCode(err), string(out)
}

// mustCrash runs a command that must crash at point.
func mustCrash(rt *runTree, point string, after int, args ...string) {
	rt.T.Helper()
	code, out := crashCmd(rt, point, after, args...)
	if code != 99 || !strings.Contains(out, "test crash at") {
		rt.T.Fatalf("fencectl %s with FENCE_CRASH=%s: exit %d, want 99 at the crash point\n%s", strings.Join(args, " "), point, code, out)
	}
}

// tortDrop puts complete files into inbox/, as a user would.
func tortDrop(rt *runTree, ids ...string) {
	rt.T.Helper()
	for _, id := range ids {
		tmp := tortWrite(rt.T, filepath.Join(filepath.Dir(rt.Dir), "drop-"+id), "dropped "+id+"\n")
		if err := os.Rename(tmp, filepath.Join(rt.Dir, "inbox", id)); err != nil {
			rt.T.Fatal(err)
		}
	}
}

// crashDamage adds a1..a3 and then moves files by hand, the way an operator
// might: two tasks in the wrong directory, and two files the journal does
// not know (one in claimed/, which replay adopts as available).
func crashDamage(rt *runTree) {
	rt.T.Helper()
	for _, id := range []string{"a1", "a2", "a3"} {
		rt.OK("add", "--id", id)
	}
	for _, mv := range [][2]string{{"available/a1", "done/a1"}, {"available/a2", "failed/a2"}} {
		if err := os.Rename(filepath.Join(rt.Dir, mv[0]), filepath.Join(rt.Dir, mv[1])); err != nil {
			rt.T.Fatal(err)
		}
	}
	tortWrite(rt.T, filepath.Join(rt.Dir, "done", "stray"), "stray\n")
	tortWrite(rt.T, filepath.Join(rt.Dir, "claimed", "stray2"), "stray2\n")
}

var crashDamagedWant = map[string]string{"a1": "available", "a2": "available", "a3": "available"}
var crashDamagedFinal = map[string]string{"a1": "available", "a2": "available", "a3": "available", "stray": "done", "stray2": "available"}

func crashCases() []crashCase {
	s := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	claimed := func(rt *runTree) string { rt.OK("add", "--id", "t1"); return tortClaim(rt, "t1", "60s") }
	expired := func(rt *runTree) string {
		rt.OK("add", "--id", "t1")
		tok := tortClaim(rt, "t1", "10s")
		rt.Advance(20 * time.Second)
		return tok
	}
	done := func(rt *runTree) { tok := claimed(rt); rt.OK("complete", "t1", "--token", tok) }
	content := func(rt *runTree, name, text string) string {
		return tortWrite(rt.T, filepath.Join(filepath.Dir(rt.Dir), name), text)
	}
	// retry repeats the crashed command: a fenced step repeated with the
	// same token answers success and changes nothing.
	retry := func(t *testing.T, rt *runTree, args []string) {
		before := len(tortLog(t, tortCmd(rt.Cmd)))
		if code, out := rt.Code(args...); code != 0 {
			t.Errorf("retry of the crashed %s: exit %d, want 0 (it had gone through)\n%s", strings.Join(args, " "), code, out)
		}
		if n := len(tortLog(t, tortCmd(rt.Cmd))); n != before {
			t.Errorf("retry of the crashed %s added %d events, want none", args[0], n-before)
		}
	}
	cases := []crashCase{
		{name: "add", point: "add:after-commit", pending: crashPendingYes, want: s("n1", "available"), content: s("n1", "content of n1\n"),
			setup: func(rt *runTree) []string {
				return []string{"add", "--id", "n1", content(rt, "n1.txt", "content of n1\n")}
			}},
		{name: "claim", point: "claim:after-commit", pending: crashPendingYes, want: s("t1", "claimed"),
			setup: func(rt *runTree) []string { rt.OK("add", "--id", "t1"); return []string{"claim", "t1", "--ttl", "60s"} }},
		{name: "claim-after-reap", point: "claim:after-commit", pending: crashPendingYes, want: s("t1", "available", "t2", "claimed"),
			setup: func(rt *runTree) []string {
				expired(rt)
				rt.OK("add", "--id", "t2")
				return []string{"claim", "t2", "--ttl", "60s"}
			}},
		{name: "claim-request-id", point: "claim:after-commit", pending: crashPendingYes, want: s("t1", "claimed"),
			setup: func(rt *runTree) []string {
				rt.OK("add", "--id", "t1")
				return []string{"claim", "--request-id", "r-1", "--agent", "holder", "--ttl", "60s"}
			},
			// The claimer never read its answer; asking again with the same
			// request id gets the same claim back.
			then: func(t *testing.T, rt *runTree, args []string) {
				m := rt.Show("t1")
				want := m["lease"].(map[string]any)["token"]
				var c map[string]any
				if err := json.Unmarshal([]byte(rt.OK(append(args, "--json")...)), &c); err != nil {
					t.Fatal(err)
				}
				if c["task"] != "t1" || c["token"] != want || c["renewed"] != true {
					t.Errorf("claim --request-id again after the crash: %v, want t1 renewed with token %v", c, want)
				}
			}},
		// A batch claim commits its claims together: all or none.
		{name: "claim-batch", point: "claim:after-commit", pending: crashPendingYes, want: s("t1", "claimed", "t2", "claimed", "t3", "claimed"),
			setup: func(rt *runTree) []string {
				rt.OK("add", "--id", "t1")
				rt.OK("add", "--id", "t2")
				rt.OK("add", "--id", "t3")
				return []string{"claim", "t1", "t2", "t3", "--ttl", "60s"}
			}},
		{name: "claim-batch-mid-moves", point: "mirror:mid", pending: crashPendingYes, want: s("t1", "claimed", "t2", "claimed", "t3", "claimed"),
			setup: func(rt *runTree) []string {
				rt.OK("add", "--id", "t1")
				rt.OK("add", "--id", "t2")
				rt.OK("add", "--id", "t3")
				return []string{"claim", "--batch", "3", "--ttl", "60s"}
			}},
		{name: "heartbeat", point: "heartbeat:after-commit", want: s("t1", "claimed"),
			setup: func(rt *runTree) []string { return []string{"heartbeat", "t1", "--token", claimed(rt)} }},
		{name: "complete-result", then: retry, point: "complete:after-commit", pending: crashPendingYes, want: s("t1", "done"), outputs: s("t1/result", "the result\n"), unpublished: []string{"t1/result"},
			setup: func(rt *runTree) []string {
				return []string{"complete", "t1", "--token", claimed(rt), "--result", content(rt, "result.txt", "the result\n")}
			}},
		{name: "release", then: retry, point: "release:after-commit", pending: crashPendingYes, want: s("t1", "available"),
			setup: func(rt *runTree) []string { return []string{"release", "t1", "--token", claimed(rt)} }},
		{name: "fail", then: retry, point: "fail:after-commit", pending: crashPendingYes, want: s("t1", "available"),
			setup: func(rt *runTree) []string { return []string{"fail", "t1", "--token", claimed(rt)} }},
		{name: "fail-last-attempt", then: retry, point: "fail:after-commit", pending: crashPendingYes, want: s("t1", "failed"),
			setup: func(rt *runTree) []string {
				rt.OK("add", "--id", "t1", "--max-attempts", "1")
				return []string{"fail", "t1", "--token", tortClaim(rt, "t1", "60s")}
			}},
		{name: "reap", point: "reap:after-commit", pending: crashPendingYes, want: s("t1", "available"),
			setup: func(rt *runTree) []string { expired(rt); return []string{"reap"} }},
		{name: "revoke", point: "revoke:after-commit", pending: crashPendingYes, want: s("t1", "available"),
			setup: func(rt *runTree) []string { claimed(rt); return []string{"revoke", "t1"} }},
		{name: "requeue", point: "requeue:after-commit", pending: crashPendingYes, want: s("t1", "available"),
			setup: func(rt *runTree) []string { done(rt); return []string{"requeue", "t1"} }},
		{name: "put", point: "put:after-commit", want: s("t1", "claimed"), outputs: s("t1/notes", "notes\n"), unpublished: []string{"t1/notes"},
			setup: func(rt *runTree) []string {
				return []string{"put", "t1", "notes", content(rt, "notes.txt", "notes\n"), "--token", claimed(rt)}
			}},
		{name: "adopt", point: "adopt:after-commit", pending: crashPendingYes, want: s("a1", "available", "a2", "available"), content: s("a1", "dropped a1\n"),
			setup: func(rt *runTree) []string { tortDrop(rt, "a1", "a2"); return []string{"reap"} }},
		{name: "adopt-mid", point: "adopt:mid", pending: crashPendingYes, want: s("a1", "available", "a2", "available", "a3", "available"),
			setup: func(rt *runTree) []string { tortDrop(rt, "a1", "a2", "a3"); return []string{"reap"} }},
		{name: "adopt-before-claim", point: "adopt:mid", pending: crashPendingYes, want: s("a1", "available", "a2", "available"),
			setup: func(rt *runTree) []string { tortDrop(rt, "a1", "a2"); return []string{"claim", "--ttl", "60s"} }},

		// Between a move's rename and its directory fsyncs: the file is in
		// place, so nothing is pending unless the commit moves more files.
		{name: "move-add", point: "move:after-rename", want: s("n1", "available"), content: s("n1", "content of n1\n"),
			setup: func(rt *runTree) []string {
				return []string{"add", "--id", "n1", content(rt, "n1.txt", "content of n1\n")}
			}},
		{name: "move-claim", point: "move:after-rename", want: s("t1", "claimed"),
			setup: func(rt *runTree) []string { rt.OK("add", "--id", "t1"); return []string{"claim", "t1", "--ttl", "60s"} }},
		{name: "move-claim-after-reap", point: "move:after-rename", pending: crashPendingAny, want: s("t1", "available", "t2", "claimed"),
			setup: func(rt *runTree) []string {
				expired(rt)
				rt.OK("add", "--id", "t2")
				return []string{"claim", "t2", "--ttl", "60s"}
			}},
		{name: "move-complete-result", then: retry, point: "move:after-rename", want: s("t1", "done"), outputs: s("t1/result", "the result\n"), unpublished: []string{"t1/result"},
			setup: func(rt *runTree) []string {
				return []string{"complete", "t1", "--token", claimed(rt), "--result", content(rt, "result.txt", "the result\n")}
			}},
		{name: "move-release", then: retry, point: "move:after-rename", want: s("t1", "available"),
			setup: func(rt *runTree) []string { return []string{"release", "t1", "--token", claimed(rt)} }},
		{name: "move-fail", then: retry, point: "move:after-rename", want: s("t1", "available"),
			setup: func(rt *runTree) []string { return []string{"fail", "t1", "--token", claimed(rt)} }},
		{name: "move-reap", point: "move:after-rename", want: s("t1", "available"),
			setup: func(rt *runTree) []string { expired(rt); return []string{"reap"} }},
		{name: "move-revoke", point: "move:after-rename", want: s("t1", "available"),
			setup: func(rt *runTree) []string { claimed(rt); return []string{"revoke", "t1"} }},
		{name: "move-requeue", point: "move:after-rename", want: s("t1", "available"),
			setup: func(rt *runTree) []string { done(rt); return []string{"requeue", "t1"} }},
		{name: "move-adopt", point: "move:after-rename", pending: crashPendingAny, want: s("a1", "available", "a2", "available", "a3", "available"),
			setup: func(rt *runTree) []string { tortDrop(rt, "a1", "a2", "a3"); return []string{"reap"} }},
		{name: "settle-move-after-claim-crash", point: "move:after-rename", want: s("t1", "claimed"),
			setup: func(rt *runTree) []string {
				rt.OK("add", "--id", "t1")
				mustCrash(rt, "claim:after-commit", 0, "claim", "t1", "--ttl", "60s")
				return []string{"reap"}
			}},
		{name: "settle-then-own-move-after-claim-crash", point: "move:after-rename", after: 2, want: s("t1", "claimed", "t2", "claimed"),
			setup: func(rt *runTree) []string {
				rt.OK("add", "--id", "t1")
				rt.OK("add", "--id", "t2")
				mustCrash(rt, "claim:after-commit", 0, "claim", "t1", "--ttl", "60s")
				// The first move is settling t1, the second its own claim's.
				return []string{"claim", "t2", "--ttl", "60s"}
			}},
		{name: "settle-move-after-adopt-mid", point: "move:after-rename", pending: crashPendingYes, want: s("a1", "available", "a2", "available", "a3", "available", "a4", "available"),
			setup: func(rt *runTree) []string {
				tortDrop(rt, "a1", "a2", "a3", "a4")
				mustCrash(rt, "adopt:mid", 0, "reap")
				// The next writer dies at the first move of its settling,
				// before its own commit.
				return []string{"claim", "--ttl", "60s"}
			}},
		{name: "settle-put-after-complete-crash", point: "complete:after-commit", pending: crashPendingYes, want: s("t1", "done"), outputs: s("t1/notes", "notes\n", "t1/result", "r\n"),
			setup: func(rt *runTree) []string {
				tok := claimed(rt)
				mustCrash(rt, "put:after-commit", 0, "put", "t1", "notes", content(rt, "notes.txt", "notes\n"), "--token", tok)
				// complete settles the put first, then crashes itself.
				return []string{"complete", "t1", "--token", tok, "--result", content(rt, "r.txt", "r\n")}
			}},

		// A replay repairing a hand-damaged tree, cut short.
		{name: "replay-after-rebuild", point: "replay:after-rebuild", pending: crashPendingYes, replayOnly: true, want: crashDamagedWant, final: crashDamagedFinal,
			setup: func(rt *runTree) []string { crashDamage(rt); return []string{"replay"} }},
		{name: "replay-mid", point: "replay:mid", pending: crashPendingYes, replayOnly: true, want: crashDamagedWant, final: crashDamagedFinal,
			setup: func(rt *runTree) []string { crashDamage(rt); return []string{"replay"} }},
		{name: "replay-move", point: "move:after-rename", pending: crashPendingAny, replayOnly: true, want: crashDamagedWant, final: crashDamagedFinal,
			setup: func(rt *runTree) []string { crashDamage(rt); return []string{"replay"} }},
		{name: "replay-adopt-mid", point: "adopt:mid", pending: crashPendingYes, want: s("i1", "available", "i2", "available"),
			setup: func(rt *runTree) []string { tortDrop(rt, "i1", "i2"); return []string{"replay"} }},
	}
	return cases
}

func TestTorture_CrashPoints(t *testing.T) {
	modes := []string{"reap", "replay"}
	if tortureFull() {
		modes = append(modes, "add", "claim")
	}
	cases := crashCases()
	var runs, hit, converged atomic.Int64
	points := map[string]bool{}
	for _, c := range cases {
		points[c.point] = true
	}
	start := time.Now()
	t.Run("group", func(t *testing.T) {
		for _, c := range cases {
			for _, mode := range modes {
				if c.replayOnly && mode != "replay" {
					continue
				}
				t.Run(c.name+"/"+mode, func(t *testing.T) {
					t.Parallel()
					runs.Add(1)
					rt := newRunTree(t)
					args := c.setup(rt)
					code, out := crashCmd(rt, c.point, c.after, args...)
					if code != 99 || !strings.Contains(out, "test crash at") {
						t.Fatalf("fencectl %s with FENCE_CRASH=%s: exit %d, want 99 at the crash point\n%s", strings.Join(args, " "), c.point, code, out)
					}
					hit.Add(1)
					crashConverges(t, rt, c, mode, args)
					if !t.Failed() {
						converged.Add(1)
					}
				})
			}
		}
	})
	tortureReport(t, "crash_points", map[string]any{
		"cases": len(cases), "named_points": len(points), "points": strings.Join(crashSortedKeys(points), " "), "recoveries": strings.Join(modes, ","), "runs": runs.Load(),
		"crash_points_hit": hit.Load(), "converged": converged.Load(), "seconds": time.Since(start).Seconds(),
	})
	if hit.Load() != runs.Load() || converged.Load() != runs.Load() {
		t.Errorf("%d runs, %d hit their crash point, %d converged", runs.Load(), hit.Load(), converged.Load())
	}
}

func crashSortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// crashConverges checks the journal right after the crash, recovers with
// mode (a writer, or replay) and checks that the tree converged.
func crashConverges(t *testing.T, rt *runTree, c crashCase, mode string, args []string) {
	mk := tortCmd(rt.Cmd)
	stateOf := func(id string) string {
		code, out := rt.Code("show", id, "--json")
		if code == clitest.ExitNoSuchTask {
			return ""
		}
		var m map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &m) != nil {
			t.Fatalf("show %s: exit %d\n%s", id, code, out)
		}
		return fmt.Sprint(m["state"])
	}
	for id, want := range c.want {
		if got := stateOf(id); got != want {
			t.Errorf("right after the crash the journal has %s as %q, want %q (the commit before the crash point must be durable)", id, got, want)
		}
	}
	code, fs, out := tortReplay(t, mk, true)
	switch {
	case c.pending == crashPendingYes && (code != clitest.ExitDrift || len(fs) == 0):
		t.Errorf("before recovery replay --check exit %d, want 7 with the moves the crash left undone:\n%s", code, out)
	case c.pending == crashPendingAny && code != 0 && code != clitest.ExitDrift:
		t.Errorf("before recovery replay --check exit %d, want 0 or 7:\n%s", code, out)
	case c.pending == crashPendingNo && code != 0:
		t.Errorf("before recovery replay --check exit %d, want 0 (nothing was left undone):\n%s", code, out)
	}
	for _, o := range c.unpublished {
		if _, err := os.Stat(filepath.Join(rt.Dir, "out", o)); err == nil {
			t.Errorf("out/%s exists right after the crash, which came before its publication: the test does not test what it says", o)
		}
	}

	// Recovery: one writer, or replay.
	var rec []string
	switch mode {
	case "reap":
		rec = []string{"reap"}
	case "add":
		rec = []string{"add", "--id", "recovery-add"}
	case "claim":
		rt.OK("add", "--id", "zz-recovery") // also a writer: it settles first
		rec = []string{"claim", "zz-recovery", "--ttl", "60s"}
	case "replay":
		rec = []string{"replay"}
	}
	if code, out := rt.Code(rec...); code != 0 {
		t.Fatalf("recovery %s: exit %d\n%s", strings.Join(rec, " "), code, out)
	}
	tortCheckClean(t, mk, "after recovery by "+mode)

	final := map[string]string{}
	for id, st := range c.want {
		final[id] = st
	}
	for id, st := range c.final {
		final[id] = st
	}
	for id, want := range final {
		if got := stateOf(id); got != want {
			t.Errorf("after recovery the journal has %s as %q, want %q", id, got, want)
		}
	}
	evs := tortLog(t, mk)
	problems, _, _ := tortAudit(t, rt.Dir, tortStates(evs))
	for _, p := range problems {
		t.Errorf("after recovery: %s", p)
	}
	fencing, _ := tortFencing(evs)
	for _, p := range fencing {
		t.Errorf("fencing history: %s", p)
	}
	for id, want := range c.content {
		b, err := os.ReadFile(filepath.Join(rt.Dir, final[id], id))
		if err != nil || string(b) != want {
			t.Errorf("task file %s after recovery: %q, %v; want %q", id, b, err, want)
		}
	}
	for o, want := range c.outputs {
		b, err := os.ReadFile(filepath.Join(rt.Dir, "out", o))
		if err != nil || string(b) != want {
			t.Errorf("out/%s after recovery: %q, %v; want %q", o, b, err, want)
		}
	}
	if n := tortDirLen(rt.Dir, "inbox"); n != 0 {
		t.Errorf("inbox/ holds %d files after recovery", n)
	}
	if n := tortDirLen(rt.Dir, ".fence/tmp"); n != 0 {
		entries, _ := os.ReadDir(filepath.Join(rt.Dir, ".fence", "tmp"))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf(".fence/tmp holds %v after recovery: a staged file was neither published nor removed", names)
	}
	if n := tortDirLen(rt.Dir, ".fence/quarantine"); n > 0 {
		t.Errorf(".fence/quarantine holds %d files: recovery found second copies", n)
	}

	if c.then != nil {
		c.then(t, rt, args)
		tortCheckClean(t, mk, "after the caller's next step")
	}

	// The tree keeps working: a new task goes through its whole life.
	rt.OK("add", "--id", "life")
	tok := tortClaim(rt, "life", "60s")
	rt.OK("complete", "life", "--token", tok)
	tortCheckClean(t, mk, "after a task's whole life following recovery")
}
