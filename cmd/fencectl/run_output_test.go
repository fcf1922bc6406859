package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
)

// `fencectl run --loop -- CMD | head -1`: once head has gone, each
// command dies of SIGPIPE at its first write. That is the reader's doing,
// not the task's: run used to fail task after task ("killed by broken
// pipe"), burning an attempt of every task in the tree, and exit 0. Now
// the task under the command is released with no attempt counted and run
// stops, exit 141 as a shell reports SIGPIPE.
func TestRun_ReaderGoneReleasesAndStops(t *testing.T) {
	for _, c := range []struct{ stream, jobs string }{{"stdout", "1"}, {"stdout", "2"}, {"stderr", "1"}} {
		stream, jobs := c.stream, c.jobs
		t.Run(stream+"/jobs="+jobs, func(t *testing.T) {
			rt := newRunTree(t)
			const tasks = 8
			for i := 1; i <= tasks; i++ {
				rt.OK("add", "--id", fmt.Sprintf("t%d", i))
			}
			to := ""
			if stream == "stderr" {
				to = " >&2"
			}
			run := rt.Cmd("run", "--loop", "--jobs", jobs, "--json", "--agent", "looper", "--",
				"sh", "-c", "echo out-$FENCE_TASK"+to+"; sleep 0.2; echo more-$FENCE_TASK"+to)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			// The other stream is kept, to read what run says.
			var kept strings.Builder
			if stream == "stdout" {
				run.Stdout, run.Stderr = w, &kept
			} else {
				run.Stdout, run.Stderr = &kept, w
			}
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { run.Process.Kill() })
			w.Close()
			// The reader takes one line and leaves.
			if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			r.Close()
			// Exited, not killed by its own SIGPIPE: it settled first.
			if code := clitest.WaitExit(t, run); code != exitBrokenPipe || run.ProcessState.ExitCode() != exitBrokenPipe {
				t.Fatalf("run exited %d (%v), want exit %d\n%s", code, run.ProcessState, exitBrokenPipe, kept.String())
			}
			if stream == "stdout" && !strings.Contains(kept.String(), "has no reader") {
				t.Errorf("run's error does not say why it stopped:\n%s", kept.String())
			}
			left := 0
			for i := 1; i <= tasks; i++ {
				task := rt.Show(fmt.Sprintf("t%d", i))
				if a := task["attempts"].(float64); a != 0 {
					t.Errorf("t%d: %v attempts counted for a reader that left (state %v)", i, a, task["state"])
				}
				switch task["state"] {
				case "available":
					left++
				case "done":
				default:
					t.Errorf("t%d is %v, want done or available", i, task["state"])
				}
			}
			if left == 0 {
				t.Errorf("run went on through every task after its reader left")
			}
			if log := rt.OK("log"); !strings.Contains(log, "run's "+stream+" has no reader") {
				t.Errorf("no release says why:\n%s", log)
			}
			rt.OK("replay", "--check")
		})
	}
}
