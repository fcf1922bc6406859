package journal

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The token ceiling.
//
// The token counter lives in journal.db, and a journal can be lost whole
// (deleted, overwritten, left behind on a dead disk). The clock alone then
// cannot say where the lost journal stopped: it may be behind. So every
// token is issued below a ceiling recorded outside journal.db, in two
// small text files: .fence/tokens, and .fence-tokens in the tree's root,
// which survives `rm -rf .fence`. A claim checks its token against the
// copy of the ceiling kept in the journal's meta bucket (no I/O); only
// when a token would pass it is the ceiling raised, by CeilingStep, and
// the files are synced before the claim commits. recover and init start
// new journals above every ceiling they can read.

// CeilingName is the ceiling's copy in the journal's directory (.fence);
// RootCeilingName is its copy in the tree root, the directory above.
const (
	CeilingName     = "tokens"
	RootCeilingName = ".fence-tokens"
)

// CeilingStep is how far above the token being issued a raise puts the
// ceiling. Tokens follow the clock in microseconds, so 2^32 is about 71
// minutes of claims at any rate: one raise (two small synced writes) per
// hour of activity, and a recovered journal starts at most that far ahead
// of the clock.
const CeilingStep = 1 << 32

// maxCeiling keeps token arithmetic far from overflow: a ceiling file that
// claims more is refused, not trusted (a real one is near 2^51 today).
const maxCeiling = math.MaxUint64 / 4

// CeilingPaths returns the ceiling's files for the journal in dir: the copy
// in dir and the copy in its parent, the tree root.
func CeilingPaths(dir string) []string {
	return []string{filepath.Join(dir, CeilingName), filepath.Join(filepath.Dir(dir), RootCeilingName)}
}

// CeilingError reports a ceiling file that exists but does not hold a
// ceiling. A token high-water mark that cannot be read is not ignored:
// the caller would otherwise start below tokens already issued.
type CeilingError struct {
	Path   string
	Detail string
}

func (e *CeilingError) Error() string {
	return fmt.Sprintf("token ceiling %s is unreadable: %s; it records the highest token this tree may have issued: restore it, or if it is lost write a number above every token ever issued into it (`fencectl status` shows the last token)", e.Path, e.Detail)
}

// ReadCeiling returns the highest ceiling recorded by the files of the
// journal in dir; found is false when there are none. A file that exists
// but is unreadable or garbled is a *CeilingError (the others are still
// read: ceiling and found cover them).
func ReadCeiling(dir string) (ceiling uint64, found bool, err error) {
	ceiling, _, found, err = ReadCeilingWitness(dir)
	return ceiling, found, err
}

// ReadCeilingWitness is ReadCeiling that also returns the newest witness
// the files record (the zero Witness when none does).
func ReadCeilingWitness(dir string) (ceiling uint64, w Witness, found bool, err error) {
	for _, p := range CeilingPaths(dir) {
		c, rerr := readCeilingFile(p)
		if rerr != nil && err == nil {
			err = rerr
		}
		if c.found {
			ceiling, found = max(ceiling, c.value), true
			// A witness is a token issued, so below its file's ceiling;
			// one that is not (edited, copied from another tree) would
			// make every claim jump: it is no witness.
			if c.witness.Token < c.value {
				w = w.newer(c.witness)
			}
		}
	}
	return ceiling, w, found, err
}

// ceilingFile is what one ceiling file holds.
type ceilingFile struct {
	value   uint64
	found   bool
	witness Witness
}

func readCeilingFile(path string) (ceilingFile, error) {
	var c ceilingFile
	// O_NONBLOCK and the fstat below: a FIFO planted there never blocks us.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return c, nil
	}
	if err != nil {
		return c, &CeilingError{Path: path, Detail: err.Error()}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return c, &CeilingError{Path: path, Detail: "not a regular file"}
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return c, &CeilingError{Path: path, Detail: err.Error()}
	}
	// The first line that is not a comment is the ceiling (all a reader
	// before witnesses reads); a witness line may follow it.
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if c.found {
			if w, ok := parseWitness(line); ok {
				c.witness = w
			} else if f := strings.Fields(line); f[0] == witnessWord && c.value > 0 {
				// A damaged witness could have named any token below the
				// ceiling: take the highest, so that a journal behind it
				// starts above the ceiling rather than pass unnoticed.
				// The next claim writes a witness in its place.
				c.witness = Witness{Token: c.value - 1}
			}
			continue
		}
		v, err := strconv.ParseUint(line, 10, 64)
		if err != nil || v > maxCeiling {
			return c, &CeilingError{Path: path, Detail: fmt.Sprintf("%q is not a token ceiling", line)}
		}
		c.value, c.found = v, true
	}
	if !c.found {
		return c, &CeilingError{Path: path, Detail: "no number in it"}
	}
	return c, nil
}

// RaiseCeiling durably records at least v in every ceiling file of the
// journal in dir, never lowering one, and keeps the witness each file
// holds. The copy in dir must be written; the
// copy in the tree root is skipped when the root is not writable by this
// user (a shared tree whose root belongs to someone else), since the copy
// in dir still holds the mark.
func RaiseCeiling(dir string, v uint64) error {
	return raiseCeiling(dir, v, nil)
}

// RaiseCeilingWitnessed is RaiseCeiling that also records w as the
// files' witness, unless they hold a newer one. v 0 raises nothing.
func RaiseCeilingWitnessed(dir string, v uint64, w Witness) error {
	return raiseCeiling(dir, v, &w)
}

func raiseCeiling(dir string, v uint64, w *Witness) error {
	if v > maxCeiling {
		return fmt.Errorf("raise the token ceiling to %d: above the largest ceiling fencectl accepts (%d)", v, uint64(maxCeiling))
	}
	unlock, err := lockCeiling(dir)
	if err != nil {
		return fmt.Errorf("raise the token ceiling: %w", err)
	}
	defer unlock()
	for i, p := range CeilingPaths(dir) {
		old, err := readCeilingFile(p)
		keep := old.witness
		if w != nil {
			keep = keep.newer(*w)
		}
		if err == nil && old.found && old.value >= v && keep == old.witness {
			continue
		}
		write := v
		if err == nil && old.found {
			write = max(v, old.value)
		}
		if write == 0 {
			continue // nothing to raise, and no ceiling to write the witness beside
		}
		err = writeCeilingFile(p, write, keep)
		if err != nil && i > 0 && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS)) {
			continue
		}
		if err != nil {
			return fmt.Errorf("raise the token ceiling: %w", err)
		}
	}
	return nil
}

// CeilingLockName is the file whose flock makes each raise of the ceiling
// files a read-compare-write no other raise interleaves with. Without it,
// two writers that do not take turns (etcd trees, several processes or
// hosts) could both read an old ceiling, and the one raising less could
// rename its file over the larger one last: the files would fall below a
// ceiling the journal already holds, and a recover after a lost journal
// could issue tokens again. (On NFS, Linux maps flock to the protocol's
// byte-range locks, so it holds across hosts.)
const CeilingLockName = "tokens.lock"

// lockCeiling takes the ceiling lock of the journal in dir and returns
// its release.
func lockCeiling(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, CeilingLockName)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "lock", Path: path, Err: err}
	}
	return func() { unix.Close(fd) }, nil
}

// writeCeilingFile replaces path atomically: a temporary file beside it,
// synced, renamed over it, and the directory synced.
func writeCeilingFile(path string, v uint64, w Witness) (err error) {
	// O_EXCL below refuses a name in use; pid and clock make a clash with
	// another writer unlikely. (Not crypto/rand: linking it runs the FIPS
	// module's initialisers at every process start, and a claim is one.)
	tmp := fmt.Sprintf("%s.tmp-%d-%d", path, os.Getpid(), time.Now().UnixNano())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	_, err = fmt.Fprintf(f, "# fencectl token ceiling: every token this tree has issued is below this\n# number. Keep this file: if the journal is lost, recover starts above it.\n%d\n%s", v, w.line())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return fsyncPath(filepath.Dir(path))
}

func fsyncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
