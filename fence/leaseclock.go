package fence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Leases that survive wall-clock jumps (bbolt trees).
//
// A lease judged by the wall clock breaks when the clock is set: an hour
// forward expires every live lease at once (and `run` stops its command),
// an hour back extends them all by an hour. So on a tree whose journal is
// on this host, the tree's clock is the lease clock: the wall time when
// this boot began, plus CLOCK_BOOTTIME, the time since the boot, which
// never jumps and counts a suspend (a lease does run out while the host
// sleeps). Every process of one boot reads the same start from
// .fence/boot, so they agree to the microsecond; deadlines, event times
// and tokens come from this clock, and it stays close to the wall clock
// unless someone sets the wall clock during the boot.
//
// A reboot changes the boot id: every lease claimed before it is dead
// (its holder's memory and processes are gone with the boot). The first
// writer of a new boot reaps them all, reason "host rebooted". Which
// leases are of earlier boots is told by their tokens, not by the time:
// the first writer records in .fence/boot the first token of this boot
// (the journal's last one + 1, read under the writer's lock, before it
// commits anything), and every lease with a lower token is of an earlier
// boot. A time would do only while the clock is right: a boot whose wall
// clock starts behind the last one's (an RTC behind, NTP not yet synced)
// would start "before" leases claimed in the boot it follows. Every
// writer with a lease clock takes part; a Tree whose caller's Clock is
// the time (Options.Clock without Boot: tests) does not, and must not
// share a tree with lease-clock writers.
//
// On an etcd tree leases are etcd's, by etcd's clock: none of this applies.

// BootClock reports the boot this process runs in (the kernel's boot id)
// and the time since that boot began, suspend included.
type BootClock func() (bootID string, since time.Duration, err error)

// ReasonHostRebooted is the reason of a reap of a lease claimed before
// the host's last reboot.
const ReasonHostRebooted = "host rebooted"

// bootFileName is the lease clock's record in .fence.
const bootFileName = "boot"

var (
	bootIDOnce sync.Once
	bootID     string
	bootIDErr  error
)

// SystemBootClock reads /proc's boot id (once) and CLOCK_BOOTTIME.
func SystemBootClock() (string, time.Duration, error) {
	bootIDOnce.Do(func() {
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		bootID, bootIDErr = strings.TrimSpace(string(b)), err
	})
	if bootIDErr != nil {
		return "", 0, bootIDErr
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, err
	}
	return bootID, time.Duration(ts.Nano()), nil
}

// leaseClock is a tree's clock on bbolt: start (the lease-clock time at
// which this boot began) plus the time since the boot.
type leaseClock struct {
	wall   func() time.Time
	boot   BootClock
	meta   string
	bootID string
	start  time.Time

	mu         sync.Mutex
	swept      bool   // the leases of earlier boots are reaped
	firstToken uint64 // the first token of this boot; 0: not known yet
	damaged    error  // .fence/boot could not be read, and was replaced
	readOnly   bool   // never writes .fence/boot (root on a user's tree: owner.go)
}

// openLeaseClock reads this boot's start from .fence/boot, or, in the
// first process of a boot, sets it from the wall clock now and records
// it (if .fence is not writable, or record is false, the start stays
// this process's own).
func openLeaseClock(meta string, wall func() time.Time, boot BootClock, record bool) (*leaseClock, error) {
	id, since, err := boot()
	if err != nil {
		return nil, err
	}
	c := &leaseClock{wall: wall, boot: boot, meta: meta, bootID: id, readOnly: !record}
	rec, rerr := readBootFile(meta)
	if rerr == nil && rec.id == id {
		c.start, c.swept, c.firstToken = rec.start, rec.swept, rec.firstToken
		return c, nil
	}
	c.start = snapStart(wall().Add(-since))
	if rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		// A record there but unreadable (damaged, edited by hand) does
		// not say this is a new boot: taking it for one would reap every
		// live lease of this boot as "host rebooted" (each token is below
		// the first token a new record would take). Replace it as swept:
		// if there was a reboot after all, the leases of the boot before
		// end at their TTL, as they did before boots were told apart.
		c.swept, c.damaged = true, rerr
		_ = c.write(false)
		return c, nil
	}
	if rerr != nil {
		// No record at all (a tree made by a fencectl before boot records,
		// or the file deleted) says nothing of a reboot: taken for one, the
		// first writer reaped every live lease as "host rebooted", and
		// killed the runs that held them (found from outside, with a tree
		// of an older version). Leases of an earlier boot, if any, end at
		// their TTL, as they did before boots were told apart.
		c.swept = true
	}
	// First come, first served: a process that loses the race reads the
	// winner's start, so all processes of a boot share one.
	if err := c.write(true); errors.Is(err, os.ErrExist) {
		if rec, err := readBootFile(meta); err == nil && rec.id == id {
			c.start, c.swept, c.firstToken = rec.start, rec.swept, rec.firstToken
		}
	}
	return c, nil
}

// now is the lease clock's time; if the boot clock cannot be read, the
// wall clock's.
func (c *leaseClock) now() time.Time {
	_, since, err := c.boot()
	if err != nil {
		return c.wall()
	}
	return c.start.Add(since).UTC()
}

// bootRecord is .fence/boot: the boot it is for, its start, and whether
// the leases of earlier boots were reaped.
type bootRecord struct {
	id         string
	start      time.Time
	swept      bool
	firstToken uint64
}

func readBootFile(meta string) (bootRecord, error) {
	b, err := journal.ReadRegular(filepath.Join(meta, bootFileName), 4096)
	if err != nil {
		return bootRecord{}, err
	}
	var r bootRecord
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch k {
		case "boot":
			r.id = v
		case "start":
			ns, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ns <= 0 {
				return bootRecord{}, fmt.Errorf("%s: bad start %q", bootFileName, v)
			}
			r.start = time.Unix(0, ns).UTC()
		case "swept":
			r.swept = v == "yes"
		case "first_token":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return bootRecord{}, fmt.Errorf("%s: bad first_token %q", bootFileName, v)
			}
			r.firstToken = n
		}
	}
	if r.id == "" || r.start.IsZero() {
		return bootRecord{}, fmt.Errorf("%s: no boot or start", bootFileName)
	}
	return r, nil
}

// write records the clock in .fence/boot. With first it replaces only a
// record of another boot (or none): os.ErrExist if this boot's is there.
func (c *leaseClock) write(first bool) error {
	if c.readOnly {
		return errors.New("the lease clock of a process that must not write the tree is not recorded")
	}
	path := filepath.Join(c.meta, bootFileName)
	swept := "no"
	if c.swept {
		swept = "yes"
	}
	body := fmt.Sprintf("# fencectl's lease clock: the wall time this boot began, on which\n# CLOCK_BOOTTIME counts on. Leases are judged by it, not by the wall clock.\nboot %s\nstart %d\nswept %s\n", c.bootID, c.start.UnixNano(), swept)
	if c.firstToken != 0 {
		body += fmt.Sprintf("first_token %d\n", c.firstToken)
	}
	tmp := fmt.Sprintf("%s.tmp-%d-%d", path, os.Getpid(), time.Now().UnixNano())
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	defer os.Remove(tmp)
	if first {
		// Link, not rename: of racing first processes, one wins.
		if rec, err := readBootFile(c.meta); err == nil && rec.id != c.bootID {
			os.Remove(path) // a record of an earlier boot
		}
		if err := os.Link(tmp, path); err != nil {
			if errors.Is(err, os.ErrExist) {
				return os.ErrExist
			}
			return err
		}
		return nil
	}
	return os.Rename(tmp, path)
}

// needsSweep reports whether the leases of earlier boots may still be in
// the journal.
func (c *leaseClock) needsSweep() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.swept
}

// markSwept records that the leases of earlier boots are reaped.
func (c *leaseClock) markSwept() {
	c.mu.Lock()
	c.swept = true
	c.mu.Unlock()
	_ = c.write(false) // if it cannot be written, the next writer looks again
}

// claimedBefore reports whether lease l was claimed before this boot
// began: by a process, and in an agent's session, that the boot ended.
// Its token says so once this boot's first is known; the time, before
// that (or if .fence/boot could not record it).
func (c *leaseClock) claimedBefore(l record.Lease) bool {
	c.mu.Lock()
	first := c.firstToken
	c.mu.Unlock()
	return l.ClaimedAt.Before(c.start) || first != 0 && l.Token < first
}

// firstWriter learns, under the writer's lock, what the boot's first
// writer recorded (another process of this boot may have swept since
// this one read .fence/boot), and if nobody has, records this boot's
// first token: first, the journal's last token + 1. It reports whether
// the sweep is still to be made.
func (c *leaseClock) firstWriter(first func() (uint64, error)) (bool, error) {
	if rec, err := readBootFile(c.meta); err == nil && rec.id == c.bootID {
		c.mu.Lock()
		c.start, c.swept, c.firstToken = rec.start, rec.swept, rec.firstToken
		c.mu.Unlock()
		if rec.swept {
			return false, nil
		}
	}
	if c.firstToken != 0 {
		return true, nil // recorded by a first writer that did not finish
	}
	tok, err := first()
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	c.firstToken = tok
	c.mu.Unlock()
	if c.write(false) != nil {
		// Unrecorded, a later writer of this boot would take its own
		// first token, above this boot's claims: judge by time alone.
		c.mu.Lock()
		c.firstToken = 0
		c.mu.Unlock()
	}
	return true, nil
}

// sweepRebooted puts every task file where the journal says (moves a
// power loss undid: bootreconcile.go), then reaps every lease claimed
// before this boot began, reason "host rebooted", and moves their files;
// the first writer of a boot does it, under the writer's lock, before
// anything else.
func (t *Tree) sweepRebooted(db journal.Store) error {
	c := t.leaseClock
	if c == nil || !c.needsSweep() {
		return nil
	}
	more, err := c.firstWriter(firstTokenOf(db))
	if err != nil || !more {
		return err
	}
	if err := t.reconcileAfterBoot(db); err != nil {
		return err
	}
	var stale []string
	err = db.View(func(tx journal.Tx) error {
		stale = stale[:0]
		return tx.Leases(func(id string) error {
			if rec, ok, err := tx.Task(id); err != nil {
				return err
			} else if ok && rec.Lease != nil && c.claimedBefore(*rec.Lease) {
				stale = append(stale, id)
			}
			return nil
		})
	})
	if err != nil || len(stale) == 0 {
		if err == nil {
			c.markSwept()
		}
		return err
	}
	var evs []record.Event
	err = db.Update(func(tx journal.Tx) error {
		evs = evs[:0]
		now := tx.Now()
		for _, id := range stale {
			rec, ok, err := tx.Task(id)
			if err != nil {
				return err
			}
			if !ok || rec.State != record.Claimed || rec.Lease == nil || !c.claimedBefore(*rec.Lease) {
				continue
			}
			_, ev, err := reapOne(tx, rec, ReasonHostRebooted, now)
			if err != nil {
				return err
			}
			evs = append(evs, ev)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(evs) > 0 {
		if _, err := t.mirrorEvents(evs, false); err != nil {
			return err
		}
		for _, ev := range evs {
			t.notify(NoticeReaped, ev.Task, "claimed before the host rebooted (token "+strconv.FormatUint(ev.Token, 10)+"): reaped, reason \""+ReasonHostRebooted+"\"")
		}
	}
	c.markSwept()
	return nil
}

// firstTokenOf returns a function that reads what the first token of a
// boot is if the boot's first writer is now: the journal's last + 1.
func firstTokenOf(db journal.Store) func() (uint64, error) {
	return func() (uint64, error) {
		var last uint64
		err := db.View(func(tx journal.Tx) error {
			last = tx.LastToken()
			return nil
		})
		return last + 1, err
	}
}

// snapStart rounds a boot's start to the whole second when it is within
// 10 ms of one: the wall and boot clocks are read one after the other, so
// the start carries the time between the two reads, and a start that is
// really on a whole second (a test clock's) should come out exactly so.
func snapStart(t time.Time) time.Time {
	if r := t.Round(time.Second); r.Sub(t).Abs() < 10*time.Millisecond {
		return r
	}
	return t
}
