//go:build fencetest

package torture

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// Torture part 6, the stuck lock: another process holds .fence/lock and
// never lets go — a foreign program (flock(1) from a shell), a fencectl
// frozen in the middle of a claim (between its journal commit and its
// rename), or a stuck reader holding the lock shared. Every command that
// needs the lock must give up within --timeout + 1 s with exit 5 and a
// message that says the journal is busy and who to look for; readers still
// work past a shared holder. Once the holder is gone the tree works again,
// and a writer killed while it waited leaves nothing behind.

// stuckHolder is a process that holds the tree's lock.
type stuckHolder struct {
	name   string
	shared bool
	pid    int // the lock's owner as /proc/locks names it
	stop   func()
}

// stuckHoldWithFlock starts flock(1) from a shell, holding the lock until
// killed.
func stuckHoldWithFlock(t *testing.T, lockPath string, shared bool) *stuckHolder {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatalf("flock(1) (util-linux) is needed to hold the lock from outside fencectl: %v", err)
	}
	mode, name := "-x", "flock -x (a foreign program)"
	if shared {
		mode, name = "-s", "flock -s (a stuck reader)"
	}
	ready := filepath.Join(t.TempDir(), "ready")
	c := exec.Command("sh", "-c", `exec flock `+mode+` "$1" sh -c 'echo $$ > "$1.tmp" && mv "$1.tmp" "$1" && exec sleep 3600' sh "$2"`, "sh", lockPath, ready)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); c.Wait() }
	t.Cleanup(stop)
	clitest.WaitFile(t, ready)
	return &stuckHolder{name: name, shared: shared, pid: stuckOwner(t, lockPath), stop: stop}
}

// stuckOwner is the one pid /proc/locks shows holding the lock: what a
// program (fencectl included) can find out about who holds it.
func stuckOwner(t *testing.T, lockPath string) int {
	t.Helper()
	_, holding := clitest.LockWaiters(t, lockPath)
	if len(holding) != 1 {
		t.Fatalf("/proc/locks shows %d holders of %s, want 1: %v", len(holding), lockPath, holding)
	}
	for pid := range holding {
		return pid
	}
	return 0
}

func TestTorture_StuckLock(t *testing.T) {
	rt := newRunTree(t)
	lockPath := filepath.Join(rt.Dir, ".fence", "lock")
	for _, id := range []string{"t1", "t2", "t9"} {
		rt.OK("add", "--id", id)
	}
	tok := tortClaim(rt, "t1", "60s")
	rt.OK("complete", "t9", "--token", tortClaim(rt, "t9", "60s"))
	content := tortWrite(t, filepath.Join(t.TempDir(), "content"), "content\n")

	writers := [][]string{
		{"add", "--id", "n1", content},
		{"claim", "t2"},
		{"heartbeat", "t1", "--token", tok},
		{"complete", "t1", "--token", tok},
		{"release", "t1", "--token", tok},
		{"fail", "t1", "--token", tok},
		{"reap"},
		{"revoke", "t1"},
		{"requeue", "t9"},
		{"put", "t1", "out", content, "--token", tok},
		{"replay"},
	}
	readers := [][]string{
		{"status"},
		{"show", "t1"},
		{"log"},
		{"verify", "t1", "--token", tok},
		{"replay", "--check"},
		{"init"}, // on an existing tree it only checks the journal
	}
	const timeout = 300 * time.Millisecond
	maxTook := map[string]time.Duration{}
	var mu sync.Mutex
	checked := 0

	// tryAll runs every command at once against the held lock; busy lists
	// the ones that must give up with exit 5.
	tryAll := func(h *stuckHolder) {
		t.Helper()
		type res struct {
			args []string
			code int
			out  string
			took time.Duration
		}
		var cmds [][]string
		for _, w := range writers {
			cmds = append(cmds, w, append(append([]string{}, w...), "--json"))
		}
		cmds = append(cmds, readers...)
		results := make([]res, len(cmds))
		var wg sync.WaitGroup
		for i, args := range cmds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := rt.Cmd(append(append([]string{}, args...), "--timeout", timeout.String())...)
				var out strings.Builder
				c.Stdout, c.Stderr = &out, &out
				start := time.Now()
				if err := c.Start(); err != nil {
					results[i] = res{args, -1, err.Error(), 0}
					return
				}
				// A command that ignores --timeout is stopped a little after
				// the bound it breaks, so that the test stays short.
				overdue := time.AfterFunc(timeout+2*time.Second, func() { c.Process.Kill() })
				err := c.Wait()
				overdue.Stop()
				results[i] = res{args, clitest.ExitCode(err), out.String(), time.Since(start)}
			}()
		}
		wg.Wait()
		pidWord := regexp.MustCompile(`\b` + strconv.Itoa(h.pid) + `\b`)
		var noPid, noPath []string
		var example string
		for _, r := range results {
			name := r.args[0]
			if name == "replay" && len(r.args) > 1 && r.args[1] == "--check" {
				name = "replay --check"
			}
			isReader := false
			for _, rd := range readers {
				if strings.Join(rd, " ") == strings.Join(r.args, " ") {
					isReader = true
				}
			}
			what := fmt.Sprintf("[%s] fencectl %s", h.name, strings.Join(r.args, " "))
			mu.Lock()
			maxTook[name] = max(maxTook[name], r.took)
			checked++
			mu.Unlock()
			if r.took > timeout+time.Second {
				t.Errorf("%s took %s (killed at --timeout + 2 s), more than --timeout %s + 1 s: exit %d\n%s", what, r.took.Round(time.Millisecond), timeout, r.code, r.out)
				continue
			}
			if isReader && h.shared {
				if r.code != 0 && !(name == "verify" && r.code == clitest.ExitFenced) {
					t.Errorf("%s: exit %d while the lock is only held shared, want it to work\n%s", what, r.code, r.out)
				}
				continue
			}
			if r.code != clitest.ExitBusy {
				t.Errorf("%s: exit %d, want 5 (busy)\n%s", what, r.code, r.out)
				continue
			}
			if !strings.Contains(r.out, "busy") {
				t.Errorf("%s: the message does not say the journal is busy:\n%s", what, r.out)
			}
			if strings.Contains(strings.Join(r.args, " "), "--json") && !strings.Contains(r.out, `"reason":"busy"`) {
				t.Errorf("%s: no JSON reason busy:\n%s", what, r.out)
			}
			// Who to look for: the process holding the lock, which
			// /proc/locks names, and the lock file by a path that works
			// from any directory (for fuser/lsof).
			if !pidWord.MatchString(r.out) {
				noPid = append(noPid, strings.Join(r.args, " "))
				example = r.out
			}
			if !strings.Contains(r.out, lockPath) {
				noPath = append(noPath, strings.Join(r.args, " "))
				example = r.out
			}
		}
		if len(noPid) > 0 {
			t.Errorf("[%s] %d busy messages do not name the holder's pid %d, which /proc/locks has (%s); e.g.\n%s", h.name, len(noPid), h.pid, strings.Join(noPid, "; "), example)
		}
		if len(noPath) > 0 {
			t.Errorf("[%s] %d busy messages do not name the lock file %s by its full path (a relative .fence/lock is wrong from any other directory) (%s); e.g.\n%s", h.name, len(noPath), lockPath, strings.Join(noPath, "; "), example)
		}
	}
	before := tortSnapshotOf(t, tortCmd(rt.Cmd), rt.Dir)
	same := func(when string) {
		t.Helper()
		if d := before.diff(tortSnapshotOf(t, tortCmd(rt.Cmd), rt.Dir)); d != "" {
			t.Errorf("%s: the busy commands changed things: %s", when, d)
		}
	}

	// 1. A foreign program holds the lock exclusively.
	h := stuckHoldWithFlock(t, lockPath, false)
	tryAll(h)
	h.stop()
	same("after the foreign exclusive holder")

	// 2. A stuck reader holds it shared: writers are busy, readers work.
	h = stuckHoldWithFlock(t, lockPath, true)
	tryAll(h)
	h.stop()
	same("after the shared holder")

	// 3. A fencectl frozen between its claim's commit and the rename holds
	// it (the test build hangs it at the crash point).
	mark := filepath.Join(t.TempDir(), "hung")
	hung := rt.Cmd("claim", "t2", "--agent", "hung", "--ttl", "60s")
	hung.Env = append(hung.Env, "FENCE_CRASH=claim:after-commit", "FENCE_CRASH_ACTION=hang", "FENCE_CRASH_MARK="+mark)
	if err := hung.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hung.Process.Kill() })
	clitest.WaitFile(t, mark)
	h = &stuckHolder{name: "fencectl claim frozen after its commit", pid: stuckOwner(t, lockPath)}
	if h.pid != hung.Process.Pid {
		t.Errorf("/proc/locks names pid %d as the holder, the frozen fencectl is %d", h.pid, hung.Process.Pid)
	}
	tryAll(h)

	// A writer killed while it waits (its content already staged) must not
	// leave its staged copy behind for good.
	big := tortWrite(t, filepath.Join(t.TempDir(), "big"), strings.Repeat("staged content\n", 4096))
	waiter := rt.Cmd("add", "--id", "n2", big, "--timeout", "60s")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	tortWaitFor(t, "the waiting add to stage its content", func() bool {
		entries, _ := os.ReadDir(filepath.Join(rt.Dir, ".fence", "tmp"))
		return len(entries) > 0
	})
	waiter.Process.Kill()
	waiter.Wait()

	// The holder dies; its claim was committed, so the next writer finishes
	// the move, and the tree works again.
	hung.Process.Kill()
	hung.Wait()
	if st := rt.Show("t2"); st["state"] != "claimed" {
		t.Errorf("t2 is %v after the frozen claim, want claimed (its commit was durable)", st["state"])
	}
	rt.OK("reap")
	tortCheckClean(t, tortCmd(rt.Cmd), "after the frozen holder died and one writer ran")
	if _, err := os.Stat(filepath.Join(rt.Dir, "claimed", "t2")); err != nil {
		t.Errorf("claimed/t2 after the next writer: %v", err)
	}
	rt.OK("replay")
	if entries, _ := os.ReadDir(filepath.Join(rt.Dir, ".fence", "tmp")); len(entries) != 0 {
		t.Errorf("after replay .fence/tmp still holds %s, staged by an add killed while it waited for the lock: nothing reports or removes it, so such files pile up for good", entries[0].Name())
	}
	rt.OK("heartbeat", "t1", "--token", tok)
	rt.OK("complete", "t1", "--token", tok)
	rt.OK("add", "--id", "after")
	tortCheckClean(t, tortCmd(rt.Cmd), "at the end")

	rep := map[string]any{"timeout_ms": timeout.Milliseconds(), "commands_checked": checked, "holders": 3}
	for name, d := range maxTook {
		rep["max_ms "+name] = d.Milliseconds()
	}
	tortureReport(t, "stuck_lock", rep)
}
