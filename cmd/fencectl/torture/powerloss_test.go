//go:build fencetest

package torture

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// Torture part 1c, power loss: moves of files that are already durable
// (claim, complete, release, fail, reap, revoke, requeue) skip their
// directory fsyncs on a bbolt tree, and the first writer of a new boot
// puts every file back where the journal says. This proves it under the
// CrashMonkey model (only what was synced survives): every rename of
// every command is logged with every directory fsync (FENCE_TEST_RENAME_LOG);
// at each crash point of TestTorture_CrashPoints, and once with the
// command run to its end, the power fails: every rename that no later
// fsync of its destination directory made durable is undone, newest
// first, and the host boots again (a new boot id). After the first
// command of the new boot, `replay --check` finds nothing, every task's
// file is where the journal says and in no other directory, no task is
// done twice, and no token issued before the power loss is accepted.

// powerLoss undoes, newest first, every rename in the log that no later
// fsync of its destination directory made durable, and returns how many
// it undid.
func powerLoss(t *testing.T, log string) int {
	t.Helper()
	f, err := os.Open(log)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type rename struct{ from, to string }
	var lines [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, strings.Fields(sc.Text()))
	}
	var lost []rename
	synced := map[string]bool{} // directories fsynced after the line being read
	for i := len(lines) - 1; i >= 0; i-- {
		switch l := lines[i]; l[0] {
		case "sync":
			synced[filepath.Clean(l[1])] = true
		case "rename":
			if !synced[filepath.Dir(l[2])] {
				lost = append(lost, rename{l[1], l[2]})
			}
		}
	}
	for _, r := range lost { // newest first, as read
		if _, err := os.Lstat(r.from); err == nil {
			t.Fatalf("power loss: cannot undo the rename %s → %s: the old name exists", r.from, r.to)
		}
		if err := os.Rename(r.to, r.from); err != nil {
			t.Fatalf("power loss: undo %s → %s: %v", r.from, r.to, err)
		}
	}
	return len(lost)
}

func TestTorture_PowerLoss(t *testing.T) {
	var runs, undone, clean atomic.Int64
	start := time.Now()
	t.Run("group", func(t *testing.T) {
		for _, c := range crashCases() {
			if c.replayOnly {
				continue // hand-made damage, not a power loss: replay's
			}
			for _, crash := range []bool{true, false} {
				name := c.name + "/crash"
				if !crash {
					name = c.name + "/ran-to-end"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					runs.Add(1)
					rt := newRunTree(t)
					log := filepath.Join(t.TempDir(), "renames")
					rt.Env = append(rt.Env, "FENCE_TEST_RENAME_LOG="+log)
					args := c.setup(rt)
					if crash {
						mustCrash(rt, c.point, c.after, args...)
					} else if code, out := rt.Code(args...); code != 0 && code != clitest.ExitFenced {
						t.Fatalf("fencectl %s: exit %d\n%s", strings.Join(args, " "), code, out)
					}
					mk := tortCmd(rt.Cmd)
					before := tortLog(t, mk)
					n := powerLoss(t, log)
					undone.Add(int64(n))
					// The host is back a second later, in a new boot.
					reboot := rt.Now.Add(time.Second)
					rt.SetClock(reboot)
					rt.Env = append(rt.Env, "FENCE_TEST_BOOT_ID=after-power-loss", "FENCE_TEST_BOOT_AT="+reboot.Format(time.RFC3339Nano), "FENCE_TEST_RENAME_LOG=")

					if code, out := rt.Code("reap"); code != 0 {
						t.Fatalf("first command after the reboot, reap: exit %d\n%s", code, out)
					}
					tortCheckClean(t, mk, fmt.Sprintf("after a power loss that undid %d renames and the first command", n))
					evs := tortLog(t, mk)
					problems, _, _ := tortAudit(t, rt.Dir, tortStates(evs))
					for _, p := range problems {
						t.Errorf("after the power loss: %s", p)
					}
					fencing, doubles := tortFencing(evs)
					for _, p := range fencing {
						t.Errorf("fencing history: %s", p)
					}
					if doubles > 0 {
						t.Errorf("%d tasks done twice", doubles)
					}
					for _, ev := range before {
						if ev.Type != "claim" {
							continue
						}
						code, out := rt.Code("heartbeat", ev.Task, "--token", fmt.Sprint(ev.Token))
						if code != clitest.ExitFenced {
							t.Errorf("heartbeat of %s with token %d from before the power loss: exit %d, want %d (stale)\n%s", ev.Task, ev.Token, code, clitest.ExitFenced, out)
						}
					}
					if !t.Failed() {
						clean.Add(1)
					}
				})
			}
		}
	})
	tortureReport(t, "power_loss", map[string]any{
		"runs": runs.Load(), "renames_undone": undone.Load(), "clean_after_first_command": clean.Load(), "seconds": time.Since(start).Seconds(),
	})
	if clean.Load() != runs.Load() {
		t.Errorf("%d runs, %d clean after the first command of the new boot", runs.Load(), clean.Load())
	}
	if undone.Load() == 0 {
		t.Errorf("no power loss undid a rename: the test tests nothing")
	}
}
