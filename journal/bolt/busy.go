package bolt

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
)

// BusyError is ErrBusy with what an operator needs to act: the lock file
// and who holds it, as /proc/locks tells (any program may hold it, not
// only fencectl). errors.Is(err, ErrBusy) is true.
type BusyError struct {
	Lock    string        // absolute path of the lock file
	Waited  time.Duration // how long we waited
	Holders []LockHolder  // empty if /proc/locks could not tell
}

// LockHolder is a process holding the lock.
type LockHolder struct {
	PID    int
	Comm   string // its command name, from /proc/PID/comm
	Shared bool   // a reader's shared lock
}

// Error names each holder once, in the order /proc/locks lists them, with
// how many of the locks it holds when more than one (a process with many
// readers on the tree holds as many shared locks): "pid 7 (fencectl,
// shared) ×24".
func (e *BusyError) Error() string {
	var holders []LockHolder
	count := map[LockHolder]int{}
	for _, h := range e.Holders {
		if count[h] == 0 {
			holders = append(holders, h)
		}
		count[h]++
	}
	var who []string
	for _, h := range holders {
		mode := "exclusive"
		if h.Shared {
			mode = "shared"
		}
		s := fmt.Sprintf("pid %d (%s, %s)", h.PID, h.Comm, mode)
		if n := count[h]; n > 1 {
			s += fmt.Sprintf(" ×%d", n)
		}
		who = append(who, s)
	}
	held := "held by another process"
	if len(who) > 0 {
		held = "held by " + strings.Join(who, ", ")
	}
	return fmt.Sprintf("journal busy: lock %s %s; waited %s", e.Lock, held, e.Waited.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == journal.ErrBusy }

// lockHolders reads /proc/locks for the granted flocks on path.
func lockHolders(path string) []LockHolder {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return nil
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []LockHolder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 13976 fe:00:9981709 0 EOF"; waiters
		// have "->" after the number and are skipped.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out = append(out, LockHolder{PID: pid, Comm: strings.TrimSpace(string(comm)), Shared: fields[3] == "READ"})
	}
	return out
}
