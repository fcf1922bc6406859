package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The baselines run the same workload as the fencectl benchmarks (claim the
// next free task, then complete it) on the same file system, written the
// way people write them today.

// ---- (a) bare rename: `mv available/x claimed/x`, first come first served.
// No journal, no fsync, no lease, no token: the floor of the unsafe pattern.

// renameClaim claims the first task it can rename out of available/.
func renameClaim(root string) (string, error) {
	for {
		d, err := os.Open(filepath.Join(root, "available"))
		if err != nil {
			return "", err
		}
		names, err := d.Readdirnames(16)
		d.Close()
		if len(names) == 0 {
			return "", fmt.Errorf("nothing to claim in %s/available (%v)", root, err)
		}
		for _, n := range names {
			err := os.Rename(filepath.Join(root, "available", n), filepath.Join(root, "claimed", n))
			if err == nil {
				return n, nil
			}
			if !errors.Is(err, fs.ErrNotExist) { // ENOENT: someone else took it
				return "", err
			}
		}
	}
}

func renameComplete(root, id string) error {
	return os.Rename(filepath.Join(root, "claimed", id), filepath.Join(root, "done", id))
}

// newRenameTree makes available/ with n empty tasks, and claimed/, done/.
func newRenameTree(b *testing.B, n int) string {
	b.Helper()
	root := b.TempDir()
	for _, d := range []string{"available", "claimed", "done"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := createEmpty(filepath.Join(root, "available"), n); err != nil {
		b.Fatal(err)
	}
	return root
}

// BenchmarkBaselineRename is the bare-rename pattern: in-process on one
// goroutine, and as one process per step (a claim process and a complete
// process per cycle, like the CLI) with 8 at once.
func BenchmarkBaselineRename(b *testing.B) {
	b.Run("mode=inproc/procs=1", func(b *testing.B) {
		n := 20000 * b.N
		root := newRenameTree(b, n)
		b.ResetTimer()
		r := runWorkers(b, 1, n, func(int, int) (time.Duration, error) {
			var id string
			lat, err := timed(func() (err error) { id, err = renameClaim(root); return err })
			if err != nil {
				return lat, err
			}
			return lat, renameComplete(root, id)
		})
		b.StopTimer()
		report(b, r)
	})
	b.Run("mode=process/procs=8", func(b *testing.B) {
		n := 1000 * b.N
		root := newRenameTree(b, n)
		b.ResetTimer()
		r := runWorkers(b, 8, n, func(int, int) (time.Duration, error) {
			var out []byte
			lat, err := timed(func() (err error) { out, err = outputOf(helper("mv-claim", root)); return err })
			if err != nil {
				return lat, helperErr(err)
			}
			return lat, helperErr(runOf(helper("mv-complete", root, strings.TrimSpace(string(out)))))
		})
		b.StopTimer()
		report(b, r)
	})
}

// ---- (b) flock + one JSON state file: lock a lock file, read every task
// from one JSON file, change one, write a temp file, fsync, rename it over
// the state file, fsync the directory. Durable, but O(tasks) per claim.

type jsonTask struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Assignee string `json:"assignee,omitempty"`
}

type jsonState struct {
	Tasks []jsonTask `json:"tasks"`
}

// jsonUpdate runs fn on the state in dir under an exclusive flock and
// writes the result back durably.
func jsonUpdate(dir string, fn func(*jsonState) error) error {
	lock, err := os.OpenFile(filepath.Join(dir, "state.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close() // drops the flock
	for {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return err
	}
	var st jsonState
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	if err := fn(&st); err != nil {
		return err
	}
	return jsonWrite(dir, &st)
}

// jsonWrite writes st to dir/state.json: temp file, fsync, rename, fsync
// the directory.
func jsonWrite(dir string, st *jsonState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "state.json.tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "state.json")); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// jsonClaim sets agent as the assignee of the first free task.
func jsonClaim(dir, agent string) (id string, err error) {
	err = jsonUpdate(dir, func(st *jsonState) error {
		for i := range st.Tasks {
			t := &st.Tasks[i]
			if t.State == "available" {
				t.State, t.Assignee, id = "claimed", agent, t.ID
				return nil
			}
		}
		return errors.New("nothing to claim")
	})
	return id, err
}

// jsonComplete marks task id done if agent holds it.
func jsonComplete(dir, id, agent string) error {
	return jsonUpdate(dir, func(st *jsonState) error {
		for i := range st.Tasks {
			t := &st.Tasks[i]
			if t.ID == id {
				if t.State != "claimed" || t.Assignee != agent {
					return fmt.Errorf("task %s is %s, held by %q, not %q", id, t.State, t.Assignee, agent)
				}
				t.State = "done"
				return nil
			}
		}
		return fmt.Errorf("no task %s", id)
	})
}

// newJSONState writes a state file with n available tasks.
func newJSONState(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	st := jsonState{Tasks: make([]jsonTask, n)}
	for i := range st.Tasks {
		st.Tasks[i] = jsonTask{ID: taskID(i), State: "available"}
	}
	if err := jsonWrite(dir, &st); err != nil {
		b.Fatal(err)
	}
	return dir
}

// jsonCycles is how many claim + complete cycles one batch does per size:
// each step reads and rewrites the whole state, so fewer for bigger files.
var jsonCycles = map[int]int{1000: 400, 10000: 100, 100000: 20}

// BenchmarkBaselineJSON is the flock + JSON state-file pattern at 1k, 10k
// and 100k tasks: in-process on one goroutine (against the library), and
// one process per step with 8 at once (against the CLI at 8 processes).
func BenchmarkBaselineJSON(b *testing.B) {
	for _, mode := range []struct {
		name  string
		procs int
	}{{"inproc", 1}, {"process", 8}} {
		for _, size := range []int{1000, 10000, 100000} {
			b.Run(fmt.Sprintf("mode=%s/procs=%d/tasks=%s", mode.name, mode.procs, sizeName(size)), func(b *testing.B) {
				dir := newJSONState(b, size)
				n := jsonCycles[size] * b.N
				b.ResetTimer()
				r := runWorkers(b, mode.procs, n, func(w, _ int) (time.Duration, error) {
					agent := fmt.Sprintf("agent-%d", w)
					if mode.name == "inproc" {
						var id string
						lat, err := timed(func() (err error) { id, err = jsonClaim(dir, agent); return err })
						if err != nil {
							return lat, err
						}
						return lat, jsonComplete(dir, id, agent)
					}
					var out []byte
					lat, err := timed(func() (err error) { out, err = outputOf(helper("json-claim", dir, agent)); return err })
					if err != nil {
						return lat, helperErr(err)
					}
					return lat, helperErr(runOf(helper("json-complete", dir, strings.TrimSpace(string(out)), agent)))
				})
				b.StopTimer()
				report(b, r)
			})
		}
	}
}

// sizeName is 1k, 10k, 100k, 1M.
func sizeName(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// ---- helper processes: this test binary, run with BENCH_HELPER set, so
// the baselines pay a process start per step as the CLI does.

// helper returns the command that runs helper name with args.
func helper(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(selfBin, args...)
	cmd.Env = append(os.Environ(), "BENCH_HELPER="+name)
	return cmd
}

// helperErr adds a helper's stderr to its error.
func helperErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return err
}

// helperMain runs helper command name in this process and returns its
// exit code. Arguments are os.Args[1:].
//
//	sigterm-recorder        write "ready" to $BENCH_READY, then on SIGTERM
//	                        write the time (Unix ns) to $BENCH_TERM, exit 143
//	mv-claim ROOT           bare-rename claim; prints the task id
//	mv-complete ROOT ID     bare-rename complete
//	json-claim DIR AGENT    JSON-state claim; prints the task id
//	json-complete DIR ID AGENT
func helperMain(name string) int {
	args := os.Args[1:]
	need := func(n int) {
		if len(args) != n {
			fmt.Fprintf(os.Stderr, "%s: want %d arguments, got %q\n", name, n, args)
			os.Exit(2)
		}
	}
	var err error
	switch name {
	case "sigterm-recorder":
		sigtermRecorder()
	case "mv-claim":
		need(1)
		var id string
		if id, err = renameClaim(args[0]); err == nil {
			fmt.Println(id)
		}
	case "mv-complete":
		need(2)
		err = renameComplete(args[0], args[1])
	case "json-claim":
		need(2)
		var id string
		if id, err = jsonClaim(args[0], args[1]); err == nil {
			fmt.Println(id)
		}
	case "json-complete":
		need(3)
		err = jsonComplete(args[0], args[1], args[2])
	default:
		err = fmt.Errorf("unknown helper %q", name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	return 0
}
