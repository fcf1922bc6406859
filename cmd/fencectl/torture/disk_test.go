package torture

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"golang.org/x/sys/unix"
)

// Torture part 5, disk full: the tree and its journal on a small tmpfs,
// filled up by a file outside the tree. Every command then either works
// (bbolt can reuse free pages of the journal) or fails with exit 1 and a
// message naming "no space left on device", changing nothing: same events,
// same files, nothing left staged, `replay --check` clean. Once the filler
// is deleted everything works again.

const diskTmpfsMagic = 0x01021994

// diskMount mounts a tmpfs of size bytes on a new directory and
// unmounts it when the test ends. It skips the test only when mounting is
// not permitted.
func diskMount(t *testing.T, size int64) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.Skipf("cannot mount a tmpfs here (%v; needs root or CAP_SYS_ADMIN): the disk-full torture part is skipped", err)
		}
		t.Fatalf("mount tmpfs on %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Logf("unmount %s: %v; detaching it", mnt, err)
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	// Never fill anything but the small tmpfs just mounted.
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != diskTmpfsMagic || int64(st.Blocks)*st.Bsize > 2*size {
		t.Fatalf("%s is not the small tmpfs just mounted (type %#x, %d bytes): refusing to fill it", mnt, st.Type, int64(st.Blocks)*st.Bsize)
	}
	return mnt
}

// diskFill writes path until the file system is full (bounded by limit, as
// a safety net) and returns the bytes written.
func diskFill(t *testing.T, path string, limit int64) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 4096, 1} {
		buf := bytes.Repeat([]byte{'x'}, chunk)
		for n < limit {
			w, err := f.Write(buf)
			n += int64(w)
			if errors.Is(err, unix.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatalf("fill %s: %v", path, err)
			}
		}
	}
	if n >= limit {
		t.Fatalf("wrote %d bytes to %s without filling it: not the small tmpfs?", n, path)
	}
	return n
}

func TestTorture_DiskFull(t *testing.T) {
	const size = 6 << 20
	mnt := diskMount(t, size)
	dir := filepath.Join(mnt, "tree")
	mk := func(args ...string) *exec.Cmd { return fencectlCmd(dir, args...) }
	run := func(args ...string) (int, string) {
		out, err := mk(args...).CombinedOutput()
		return clitest.ExitCode(err), string(out)
	}
	ok := func(args ...string) string {
		t.Helper()
		code, out := run(args...)
		if code != 0 {
			t.Fatalf("fencectl %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	token := func(out string) string {
		var c struct {
			Token uint64 `json:"token"`
		}
		if err := json.NewDecoder(strings.NewReader(out)).Decode(&c); err != nil || c.Token == 0 {
			t.Fatalf("claim output %q: %v", out, err)
		}
		return fmt.Sprint(c.Token)
	}
	ok("init", "--ttl", "1h")
	for _, id := range []string{"t1", "t2", "t3", "t4", "t5"} {
		ok("add", "--id", id)
	}
	tok2 := token(ok("claim", "t2", "--json"))
	tok3 := token(ok("claim", "t3", "--json"))
	tok4 := token(ok("claim", "t4", "--json"))

	// Content larger than the whole file system, kept outside it.
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), (size+(1<<20))/16), 0o644); err != nil {
		t.Fatal(err)
	}
	small := tortWrite(t, filepath.Join(t.TempDir(), "small"), "small\n")

	// A file dropped into inbox/ before the disk fills: adoption needs a
	// journal commit.
	if err := os.WriteFile(filepath.Join(mnt, "drop"), []byte("dropped\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "drop"), filepath.Join(dir, "inbox", "d1")); err != nil {
		t.Fatal(err)
	}
	ok("status") // a reader adopts nothing

	filler := filepath.Join(mnt, "filler")
	filled := diskFill(t, filler, 2*size)
	t.Logf("filled %s with %d bytes", mnt, filled)

	// Writes may still succeed while the journal has free pages to reuse;
	// heartbeats append events until the journal needs a new page.
	beats := 0
	for ; beats < 500; beats++ {
		code, out := run("heartbeat", "t2", "--token", tok2)
		if code == 0 {
			continue
		}
		if code != clitest.ExitError || !strings.Contains(out, "no space left on device") {
			t.Fatalf("heartbeat on a full disk: exit %d, want 0 or 1 with \"no space left on device\"\n%s", code, out)
		}
		break
	}
	if beats == 500 {
		t.Fatalf("500 heartbeats succeeded on a full disk: the journal never needed a page")
	}
	t.Logf("%d heartbeats went through on the full disk before the journal needed a new page", beats)

	outcomes := map[string]string{}
	failed := 0
	attempt := func(name string, mayWork bool, args ...string) {
		t.Helper()
		before := tortSnapshotOf(t, mk, dir)
		code, out := run(args...)
		after := tortSnapshotOf(t, mk, dir)
		switch {
		case code == clitest.ExitError && strings.Contains(out, "no space left on device"):
			failed++
			outcomes[name] = "exit 1: " + strings.TrimSpace(strings.TrimPrefix(out, "fencectl: "))
			if d := before.diff(after); d != "" {
				t.Errorf("%s failed on the full disk but changed things: %s", name, d)
			}
		case code == 0 && mayWork:
			outcomes[name] = "ok (reused free journal pages)"
		default:
			outcomes[name] = fmt.Sprintf("exit %d: %s", code, strings.TrimSpace(out))
			t.Errorf("%s on a full disk: exit %d, want exit 1 with a message naming \"no space left on device\"\n%s", name, code, out)
		}
		if code != 0 && !strings.Contains(out, dir) {
			t.Errorf("%s: the message does not say where it could not write (no path under %s):\n%s", name, dir, out)
		}
		if strings.Contains(out, "goroutine ") || strings.Contains(out, "panic") {
			t.Errorf("%s: a Go stack trace or panic reached the user:\n%s", name, out)
		}
		if n := tortDirLen(dir, ".fence/tmp"); n != 0 {
			t.Errorf("after %s .fence/tmp holds %d files", name, n)
		}
		// Readers keep working on a full disk, and find nothing half done.
		tortCheckClean(t, mk, "on the full disk after "+name)
	}
	// Whether the heartbeats above got through or not, adoption came
	// first: it either worked or left d1 in inbox/.
	adopted := tortDirLen(dir, "inbox") == 0
	attempt("add (content larger than the disk)", false, "add", "--id", "big", big)
	attempt("add (small content)", true, "add", "--id", "n1", small)
	attempt("add (empty)", true, "add", "--id", "n2")
	attempt("claim", true, "claim", "t1", "--json")
	attempt("claim next", true, "claim", "--json")
	attempt("complete", true, "complete", "t2", "--token", tok2)
	attempt("complete --result (larger than the disk)", false, "complete", "t3", "--token", tok3, "--result", big)
	attempt("put (larger than the disk)", false, "put", "t4", "big", big, "--token", tok4)
	attempt("heartbeat", true, "heartbeat", "t4", "--token", tok4)
	attempt("release", true, "release", "t4", "--token", tok4)
	// A new tree cannot be made on the full disk, and no half-made journal
	// is left behind.
	dir2 := filepath.Join(mnt, "tree2")
	b, err := fencectlCmd(dir2, "init").CombinedOutput()
	outcomes["init (new tree)"] = fmt.Sprintf("exit %d: %s", clitest.ExitCode(err), strings.TrimSpace(string(b)))
	if clitest.ExitCode(err) != clitest.ExitError || !strings.Contains(string(b), "no space left on device") {
		t.Errorf("init of a new tree on the full disk: exit %d, want 1 naming \"no space left on device\"\n%s", clitest.ExitCode(err), b)
	}
	for _, f := range []string{"journal.db", "journal.db.creating"} {
		if _, err := os.Lstat(filepath.Join(dir2, ".fence", f)); err == nil {
			t.Errorf("init failed on the full disk but left .fence/%s behind", f)
		}
	}
	for _, r := range []string{"status", "log", "show t1"} {
		if code, out := run(append(strings.Fields(r), "--json")...); code != 0 {
			t.Errorf("%s on the full disk: exit %d\n%s", r, code, out)
		}
	}

	// Space comes back: everything works again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	tortCheckClean(t, mk, "after the filler was deleted")
	if code, out := run("replay"); code != 0 {
		t.Errorf("replay after the filler was deleted: exit %d\n%s", code, out)
	}
	if b, err := fencectlCmd(dir2, "init").CombinedOutput(); err != nil {
		t.Errorf("init of the new tree once the disk has space: %v\n%s", err, b)
	} else if b, err := fencectlCmd(dir2, "replay", "--check").CombinedOutput(); err != nil {
		t.Errorf("replay --check on the tree made after the disk was freed: %v\n%s", err, b)
	}
	medium := tortWrite(t, filepath.Join(t.TempDir(), "medium"), strings.Repeat("m", 1<<20))
	ok("add", "--id", "after-medium", medium)
	if tortDirLen(dir, "inbox") != 0 {
		t.Errorf("inbox/d1 was not adopted once the disk had space")
	}
	t.Logf("d1 adopted while the disk was full: %v", adopted)
	ok("add", "--id", "after", small)
	tok := token(ok("claim", "after", "--json"))
	ok("heartbeat", "after", "--token", tok)
	ok("put", "after", "log", small, "--token", tok)
	ok("complete", "after", "--token", tok, "--result", small)
	// Whatever the full disk allowed or refused, every task can still be
	// finished: claim and complete all that is left.
	for {
		code, out := run("claim", "--json")
		if code == clitest.ExitNotAvailable {
			break
		}
		if code != 0 {
			t.Fatalf("claim after the disk was freed: exit %d\n%s", code, out)
		}
		var c struct {
			Task  string `json:"task"`
			Token uint64 `json:"token"`
		}
		json.NewDecoder(strings.NewReader(out)).Decode(&c)
		ok("complete", c.Task, "--token", fmt.Sprint(c.Token))
	}
	for id, tk := range map[string]string{"t2": tok2, "t3": tok3, "t4": tok4} {
		if code, out := run("complete", id, "--token", tk); code != 0 && code != clitest.ExitFenced {
			t.Errorf("complete %s after the disk was freed: exit %d\n%s", id, code, out)
		}
	}
	tortCheckClean(t, mk, "at the end")
	evs := tortLog(t, mk)
	problems, _, _ := tortAudit(t, dir, tortStates(evs))
	for _, p := range problems {
		t.Errorf("at the end: %s", p)
	}
	fencing, _ := tortFencing(evs)
	for _, p := range fencing {
		t.Errorf("fencing history: %s", p)
	}
	names := make([]string, 0, len(outcomes))
	for name := range outcomes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Logf("full disk: %-42s %s", name, outcomes[name])
	}
	if failed < 3 {
		t.Errorf("only %d commands failed on the full disk: the test did not reach the disk-full paths it is meant to test", failed)
	}
	rep := map[string]any{"tmpfs_bytes": size, "filled_bytes": filled, "heartbeats_before_full": beats, "refused_for_space": failed}
	for name, o := range outcomes {
		rep["op "+name] = o
	}
	tortureReport(t, "disk_full", rep)
}
