//go:build fencetest

package torture

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"golang.org/x/sys/unix"
)

// Torture part 3, the paused holder: a holder (`fencectl run` and its
// command, plus five mutations of its own already on their way to the
// journal) is frozen with SIGSTOP, its lease runs out on the test clock,
// another agent claims the task, and the holder is woken with SIGCONT.
// Every mutation it attempts with its old token, in flight or after, must
// be refused with exit 3; `run` must notice and stop its command.

// tortProcState is the state letter of /proc/<pid>/stat ('R', 'S', 'T', 'Z'…),
// or 0 if the process is gone.
func tortProcState(pid int) byte {
	// Every thread's state, not the leader's alone: SIGSTOP stops each
	// thread when it next runs, so a Go process can show T in
	// /proc/PID/stat while its thread blocked in flock(2) has yet to stop,
	// and that thread can still take the lock on its way to stopping.
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return 0
	}
	state := byte(0)
	for _, task := range tasks {
		st := threadState(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if st == 0 {
			continue // the thread ended meanwhile
		}
		if state == 0 || state == 'T' || state == 't' {
			state = st
		}
	}
	return state
}

func threadState(path string) byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

func TestTorture_PausedHolder(t *testing.T) {
	metrics := map[string]any{}
	t.Run("frozen-holder", func(t *testing.T) { pausedHolder(t, metrics) })
	t.Run("frozen-supervisor", func(t *testing.T) { pausedSupervisor(t, metrics) })
	tortureReport(t, "paused_holder", metrics)
}

// pausedHolder freezes `run`, its command and five mutations in flight.
func pausedHolder(t *testing.T, metrics map[string]any) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	script := `echo "$FENCE_TOKEN" > ` + marks + `/token.tmp; mv ` + marks + `/token.tmp ` + marks + `/token; ` + worker(marks, false)
	run, runOut := rt.StartRun("t1", "--ttl", "3s", "--agent", "paused", "--", "sh", "-c", script)
	oldTok := clitest.WaitFile(t, marks+"/token")
	cmdPid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
	if st := rt.Show("t1"); st["state"] != "claimed" {
		t.Fatalf("t1 is %v under run, want claimed", st["state"])
	}

	// The holder's own mutations are already on their way: started while
	// the journal is busy (the test holds the lock), so each is parked
	// in flock when the holder freezes.
	lockPath := filepath.Join(rt.Dir, ".fence", "lock")
	lf, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	result := tortWrite(t, filepath.Join(marks, "result.txt"), "paused result\n")
	inflightArgs := [][]string{
		{"heartbeat", "t1", "--token", oldTok},
		{"put", "t1", "paused-out", result, "--token", oldTok},
		{"complete", "t1", "--token", oldTok, "--result", result},
		{"release", "t1", "--token", oldTok},
		{"fail", "t1", "--token", oldTok},
	}
	type inflight struct {
		args []string
		cmd  *exec.Cmd
		out  *strings.Builder
	}
	var flights []inflight
	for _, args := range inflightArgs {
		c := rt.Cmd(append(args, "--agent", "paused", "--json")...)
		var out strings.Builder
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill() })
		flights = append(flights, inflight{args, c, &out})
	}
	for _, f := range flights {
		pid := f.cmd.Process.Pid
		tortWaitFor(t, fmt.Sprintf("%s (pid %d) to wait for the lock", f.args[0], pid), func() bool {
			w, _ := clitest.LockWaiters(t, lockPath)
			return w[pid]
		})
	}

	// Freeze the whole holder: the supervisor, its command's process group
	// and the mutations in flight.
	stopped := []int{run.Process.Pid, cmdPid}
	for _, f := range flights {
		stopped = append(stopped, f.cmd.Process.Pid)
	}
	if err := syscall.Kill(run.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-cmdPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, f := range flights {
		if err := f.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	cont := func() {
		syscall.Kill(run.Process.Pid, syscall.SIGCONT)
		syscall.Kill(-cmdPid, syscall.SIGCONT)
		for _, f := range flights {
			f.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(cont) // never leave stopped processes behind
	for i, pid := range stopped {
		what := []string{"run", "its command"}
		name := "in-flight " + strings.Join(inflightArgs[max(i-2, 0)][:1], "")
		if i < 2 {
			name = what[i]
		}
		tortWaitFor(t, fmt.Sprintf("%s (pid %d) to stop", name, pid), func() bool {
			switch tortProcState(pid) {
			case 'T', 't':
				return true
			case 'D':
				// The command's shell may sit in vfork, waiting for a child
				// that was stopped before its exec: frozen all the same.
				return i == 1
			case 0, 'Z', 'X':
				t.Fatalf("%s (pid %d) ended before it could be frozen:\n%s", name, pid, runOut)
			}
			return false
		})
	}

	// The lease runs out; another agent claims (reaping it first).
	rt.Advance(10 * time.Second)
	unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	code, out := rt.Code("claim", "t1", "--agent", "taker", "--ttl", "60s", "--json", "--timeout", "5s")
	if code != 0 {
		t.Fatalf("taker's claim while the holder is frozen: exit %d, want 0 (a frozen waiter must not own the lock)\n%s", code, out)
	}
	var taken struct {
		Token uint64 `json:"token"`
	}
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&taken); err != nil { // stdout's object comes first
		t.Fatalf("taker's claim output %q: %v", out, err)
	}
	old, _ := strconv.ParseUint(oldTok, 10, 64)
	if taken.Token <= old {
		t.Errorf("taker's token %d is not above the frozen holder's %d", taken.Token, old)
	}

	// Wake the holder.
	cont()
	attempts, accepted := 0, 0
	verdict := func(what string, code int, out string) {
		attempts++
		switch code {
		case clitest.ExitFenced:
		case 0:
			accepted++
			t.Errorf("STALE TOKEN ACCEPTED: %s with the frozen holder's token %s exited 0\n%s", what, oldTok, out)
		default:
			t.Errorf("%s with the frozen holder's token: exit %d, want 3 (fenced)\n%s", what, code, out)
		}
	}
	for _, f := range flights {
		code := clitest.WaitExit(t, f.cmd)
		verdict("in-flight "+strings.Join(f.args[:1], " "), code, f.out.String())
		if code == clitest.ExitFenced && !strings.Contains(f.out.String(), `"code":3`) {
			t.Errorf("in-flight %s: exit 3 without the JSON refusal on stderr:\n%s", f.args[0], f.out)
		}
	}
	runCode := clitest.WaitExit(t, run)
	if runCode != clitest.ExitFenced {
		t.Errorf("fencectl run exited %d after waking, want 3 (lease lost)\n%s", runCode, runOut)
	}
	// The command is stopped at once: its lease is already past, so run
	// may skip the grace and SIGKILL it before its TERM trap runs.
	tortWaitFor(t, "the command to end", func() bool { return !clitest.Alive(cmdPid) })
	t.Logf("fencectl run after waking:\n%s", runOut)
	if !strings.Contains(runOut.String(), "SIGTERM") {
		t.Errorf("run's stderr does not say it stopped the command:\n%s", runOut)
	}

	// Awake, the holder tries again, one step at a time.
	for _, args := range [][]string{
		{"heartbeat", "t1", "--token", oldTok},
		{"put", "t1", "paused-out", result, "--token", oldTok},
		{"complete", "t1", "--token", oldTok},
		{"complete", "t1", "--token", oldTok, "--result", result},
		{"release", "t1", "--token", oldTok},
		{"fail", "t1", "--token", oldTok},
		{"verify", "t1", "--token", oldTok},
		{"claim", "t1", "--token", oldTok},
		{"claim", "--token", oldTok},
	} {
		code, out := rt.Code(append(args, "--agent", "paused")...)
		verdict(strings.Join(args[:1], " ")+" after waking", code, out)
	}

	// The journal and the tree: the taker holds t1, nothing of the frozen
	// holder's got in, and the taker can finish.
	m := rt.Show("t1")
	lease, _ := m["lease"].(map[string]any)
	if m["state"] != "claimed" || lease == nil || lease["agent"] != "taker" || uint64(lease["token"].(float64)) != taken.Token {
		t.Errorf("t1 after the frozen holder woke: %v, want claimed by taker with token %d", m, taken.Token)
	}
	if _, err := os.Stat(filepath.Join(rt.Dir, "out", "t1")); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(filepath.Join(rt.Dir, "out", "t1"))
		t.Errorf("out/t1 exists (%d entries): the frozen holder wrote an output", len(entries))
	}
	if n := tortDirLen(rt.Dir, ".fence/tmp"); n != 0 {
		t.Errorf(".fence/tmp holds %d files: a refused put or complete --result left its staged content", n)
	}
	evs := tortLog(t, tortCmd(rt.Cmd))
	var reaped bool
	for _, ev := range evs {
		if ev.Token == old && ev.Type == "reap" {
			reaped = true
		} else if ev.Token == old && reaped {
			t.Errorf("event %d (%s) with the frozen holder's token after its lease was reaped", ev.Seq, ev.Type)
		}
	}
	if !reaped {
		t.Errorf("the log has no reap of the frozen holder's token %d", old)
	}
	fencing, _ := tortFencing(evs)
	for _, p := range fencing {
		t.Errorf("fencing history: %s", p)
	}
	rt.OK("complete", "t1", "--token", strconv.FormatUint(taken.Token, 10), "--agent", "taker")
	if st := rt.Show("t1")["state"]; st != "done" {
		t.Errorf("t1 is %v after the taker completed it, want done", st)
	}
	tortCheckClean(t, tortCmd(rt.Cmd), "after the paused-holder run")

	metrics["attempts"], metrics["accepted"], metrics["in_flight"] = attempts, accepted, len(flights)
	metrics["run_exit"], metrics["command_stopped"] = runCode, !clitest.Alive(cmdPid)
}

// pausedSupervisor freezes only `run`: its command goes on writing
// outputs with the old token while another agent takes the task over. The
// fence at the resource must refuse every write after the takeover, and
// run, once awake, must stop the command.
func pausedSupervisor(t *testing.T, metrics map[string]any) {
	rt := newRunTree(t)
	rt.OK("add", "--id", "t1")
	marks := t.TempDir()
	script := clitest.HostPid(marks+"/pid") + `
echo "$FENCE_TOKEN" > ` + marks + `/token.tmp; mv ` + marks + `/token.tmp ` + marks + `/token
echo mine > ` + marks + `/beat
while :; do "$FC" put "$FENCE_TASK" beat ` + marks + `/beat --token "$FENCE_TOKEN" >/dev/null 2>&1; echo $? >> ` + marks + `/codes; sleep 0.01; done`
	c := rt.Cmd("run", "t1", "--ttl", "3s", "--agent", "supervised", "--", "sh", "-c", script)
	c.Env = append(c.Env, "FC="+fencectlBin)
	var runOut strings.Builder
	c.Stdout, c.Stderr = &runOut, &runOut
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(c.Process.Pid, syscall.SIGCONT); c.Process.Kill() })
	oldTok := clitest.WaitFile(t, marks+"/token")
	cmdPid, _ := strconv.Atoi(clitest.WaitFile(t, marks+"/pid"))
	codes := func() []string {
		b, _ := os.ReadFile(marks + "/codes")
		return strings.Fields(string(b))
	}
	tortWaitFor(t, "the command's first accepted put", func() bool {
		for _, c := range codes() {
			if c == "0" {
				return true
			}
		}
		return false
	})

	// Freeze run, but not while it holds the lock for one of its lease
	// checks: a frozen lock holder is the stuck-lock case, not this one.
	lockPath := filepath.Join(rt.Dir, ".fence", "lock")
	for try := 0; ; try++ {
		if err := syscall.Kill(c.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		tortWaitFor(t, "run to stop", func() bool { return tortProcState(c.Process.Pid) == 'T' })
		if _, holding := clitest.LockWaiters(t, lockPath); !holding[c.Process.Pid] {
			break
		}
		if try == 100 {
			t.Fatal("run held the lock every time it was frozen")
		}
		syscall.Kill(c.Process.Pid, syscall.SIGCONT)
		tortWaitFor(t, "run to resume", func() bool { return tortProcState(c.Process.Pid) != 'T' })
	}
	rt.Advance(10 * time.Second)
	out := rt.OK("claim", "t1", "--agent", "taker", "--ttl", "60s", "--json", "--timeout", "5s")
	var taken struct {
		Token uint64 `json:"token"`
	}
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&taken); err != nil {
		t.Fatal(err)
	}
	newTok := strconv.FormatUint(taken.Token, 10)
	theirs := tortWrite(t, filepath.Join(t.TempDir(), "theirs"), "the taker's\n")
	rt.OK("put", "t1", "beat", theirs, "--token", newTok)
	from := len(codes())
	// The command goes on writing with its old token: three more tries.
	tortWaitFor(t, "three more puts by the command", func() bool { return len(codes()) >= from+4 })
	if b, err := os.ReadFile(filepath.Join(rt.Dir, "out", "t1", "beat")); err != nil || string(b) != "the taker's\n" {
		t.Errorf("out/t1/beat is %q (%v) after the takeover, want the taker's: the stale holder overwrote it", b, err)
	}

	if err := syscall.Kill(c.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	runCode := clitest.WaitExit(t, c)
	if runCode != clitest.ExitFenced {
		t.Errorf("run exited %d after waking, want 3\n%s", runCode, runOut.String())
	}
	tortWaitFor(t, "the command to end", func() bool { return !clitest.Alive(cmdPid) })
	after := codes()[from:]
	for i, code := range after {
		if code == "0" {
			t.Errorf("put #%d by the command after the takeover exited 0", from+i+1)
		}
	}

	old, _ := strconv.ParseUint(oldTok, 10, 64)
	evs := tortLog(t, tortCmd(rt.Cmd))
	reapSeq, stalePuts, puts := uint64(0), 0, 0
	for _, ev := range evs {
		switch {
		case ev.Type == "reap" && ev.Token == old:
			reapSeq = ev.Seq
		case ev.Type == "put" && ev.Token == old:
			puts++
			if reapSeq != 0 {
				stalePuts++
				t.Errorf("event %d: put with the old token %d after its lease was reaped (seq %d)", ev.Seq, old, reapSeq)
			}
		}
	}
	accepted := 0
	for _, code := range codes() {
		if code == "0" {
			accepted++
		}
	}
	if accepted != puts {
		t.Errorf("the command's puts exited 0 %d times, the log has %d puts with its token", accepted, puts)
	}
	if b, err := os.ReadFile(filepath.Join(rt.Dir, "out", "t1", "beat")); err != nil || string(b) != "the taker's\n" {
		t.Errorf("out/t1/beat is %q (%v) at the end, want the taker's", b, err)
	}
	fencing, _ := tortFencing(evs)
	for _, p := range fencing {
		t.Errorf("fencing history: %s", p)
	}
	tortCheckClean(t, tortCmd(rt.Cmd), "after the frozen-supervisor run")
	metrics["supervisor_puts_after_takeover"] = len(after)
	metrics["supervisor_puts_accepted_after_takeover"] = stalePuts
	metrics["supervisor_run_exit"] = runCode
	if n, ok := metrics["attempts"].(int); ok {
		metrics["attempts"] = n + len(after)
		metrics["accepted"] = metrics["accepted"].(int) + stalePuts
	}
}

// worker is a CMD script: it records its pid and that it started, and on
// SIGTERM records the test clock's time, then exits 143 unless told to
// ignore the signal.
func worker(dir string, ignoreTerm bool) string {
	onTerm := `cat "$FENCE_TEST_CLOCK" > ` + dir + `/term; exit 143`
	if ignoreTerm {
		onTerm = `cat "$FENCE_TEST_CLOCK" > ` + dir + `/term`
	}
	return `trap '` + onTerm + `' TERM; ` + clitest.HostPid(dir+"/pid") + `; while :; do sleep 0.02; done`
}
