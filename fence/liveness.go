package fence

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// Instant death detection.
//
// A lease alone says a holder is gone only when its TTL runs out: with a
// ten-minute TTL, a `fencectl run` killed a second after its claim holds
// the task for ten minutes while nobody works on it. Where the holder's
// death means the work stopped (run, whose command dies with it; a
// library user who asks for it with KeeperConfig.TieToProcess), the
// holder also keeps a liveness file, .fence/live/<token>.<holder>, with an
// exclusive flock on it for as long as its process lives. The kernel drops
// the lock when the process dies, however it dies: every reap (each claim,
// `reap`) tries the lock, and a claim all of whose liveness files can be
// locked has no live holder: it is reaped at once, reason "holder died",
// and the attempt counts.
//
// Only on a tree whose journal is on this host (bbolt): on an etcd tree
// the holder may be on another host, where its flock means nothing here,
// and its lease is left to expire.
//
// A bare `claim` or the MCP server never ties its claim to a process: the
// worker there is the agent, which outlives its shell or server and comes
// back with its token.

// liveDirName is the liveness files' directory in .fence.
const liveDirName = "live"

// The reasons a reap records: the lease ran out, or the holder's process
// died (see deadHolders).
const (
	ReasonExpiredLease = "lease expired"
	ReasonHolderDied   = "holder died"
)

// liveTmpAge is how old an unlocked temporary liveness file must be before
// a reaper removes it: younger, it may be one a holder is about to lock.
const liveTmpAge = time.Minute

// holdLiveness ties the claim of token to this process: it creates a
// liveness file, locked before it gets its name (a reaper never sees it
// unlocked while this process lives), opened close-on-exec so that no
// command this process starts keeps it alive. release removes it.
func (t *Tree) holdLiveness(token uint64) (release func(), err error) {
	dir := filepath.Join(t.metaDir, liveDirName)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	tmp := filepath.Join(dir, ".tmp-"+suffix)
	name := filepath.Join(dir, strconv.FormatUint(token, 10)+"."+suffix)
	fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	if err := flockRetry(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		os.Remove(tmp)
		return nil, &os.PathError{Op: "lock", Path: tmp, Err: err}
	}
	if err := os.Rename(tmp, name); err != nil {
		unix.Close(fd)
		os.Remove(tmp)
		return nil, err
	}
	return func() {
		// Unlinked before the lock goes: never an unlocked file under a
		// claim's name while its holder is alive and well.
		os.Remove(name)
		unix.Close(fd)
	}, nil
}

func flockRetry(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); err != unix.EINTR {
			return err
		}
	}
}

// deadHolders returns the tokens whose every liveness file is unlocked:
// their holders' processes are gone. With tidy, unlocked files of tokens
// that hold no lease any more are removed as they are found (a holder
// that died after its claim ended, or whose claim was reaped already).
func (t *Tree) deadHolders(tx journal.Tx, tidy bool) (map[uint64]bool, error) {
	if t.store.Name() != "bbolt" {
		return nil, nil
	}
	if dead, ok := t.batch.holders.get(tx); ok {
		return dead, nil
	}
	t.batch.holders.scans.Add(1)
	dead, err := t.scanHolders(tx, tidy)
	if err == nil {
		t.batch.holders.put(tx, dead)
	}
	return dead, err
}

// holderScan keeps the liveness scan (deadHolders) of the one transaction
// a group commit is running, for the other operations of the group: a
// commit of eight claims looks at .fence/live once, not eight times. Each
// later operation judges the tokens by its own view of the transaction
// (leaseOf): those an earlier one reaped hold no lease any more. A holder
// that dies meanwhile is found by the next commit, as one that dies just
// after the scan always is.
type holderScan struct {
	mu   sync.Mutex
	tx   journal.Tx // the group's transaction while it runs, else nil
	dead map[uint64]bool
	done bool
	// scans counts the scans made, for tests.
	scans atomic.Int64
}

// begin starts keeping the scan of tx; end forgets it.
func (h *holderScan) begin(tx journal.Tx) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tx, h.dead, h.done = tx, nil, false
}

func (h *holderScan) end() { h.begin(nil) }

// get returns a copy of the scan kept for tx, if any.
func (h *holderScan) get(tx journal.Tx) (map[uint64]bool, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done || h.tx == nil || h.tx != tx {
		return nil, false
	}
	return maps.Clone(h.dead), true
}

// put keeps dead as tx's scan, if tx is the group's transaction.
func (h *holderScan) put(tx journal.Tx, dead map[uint64]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tx != nil && h.tx == tx {
		h.dead, h.done = maps.Clone(dead), true
	}
}

// scanHolders is deadHolders without the group's scan.
func (t *Tree) scanHolders(tx journal.Tx, tidy bool) (map[uint64]bool, error) {
	dir := filepath.Join(t.metaDir, liveDirName)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	alive := map[uint64]bool{}
	files := map[uint64][]string{}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if strings.HasPrefix(name, ".tmp-") {
			if info, err := e.Info(); tidy && err == nil && time.Since(info.ModTime()) > liveTmpAge && !locked(path) {
				os.Remove(path)
			}
			continue
		}
		tok, _, ok := strings.Cut(name, ".")
		token, err := strconv.ParseUint(tok, 10, 64)
		if !ok || err != nil || !e.Type().IsRegular() {
			continue // not ours: left alone
		}
		files[token] = append(files[token], path)
		if locked(path) {
			alive[token] = true
		}
	}
	dead := map[uint64]bool{}
	for token, paths := range files {
		if alive[token] {
			continue
		}
		if _, current, err := leaseOf(tx, token); err != nil {
			return nil, err
		} else if current {
			dead[token] = true
			continue
		}
		for _, p := range paths {
			if tidy {
				os.Remove(p)
			}
		}
	}
	return dead, nil
}

// locked reports whether path's holder may still live: another open file
// holds its lock, or the file is gone or going. A holder that is done
// removes its file and then lets the lock go, while its claim is still
// current (run stops its keeper before it completes the task): a file
// that vanished, or was unlinked between our open and our lock, was let
// go on purpose, by a live holder. Only a file still linked whose lock
// we get was left by a process that died. A file that cannot be opened
// counts as locked too: it is not this function's to judge.
func locked(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true
	}
	var st unix.Stat_t
	return unix.Fstat(fd, &st) != nil || st.Nlink == 0
}

// reapDead reaps the claims whose holders died (see deadHolders), as
// reapExpired reaps expired ones, with reason "holder died", except the
// claim of token keep: the claim a request id names, which the claim
// being made with that id takes back (a run retried with --request-id
// after it died resumes its claim rather than reaping it).
func (t *Tree) reapDead(tx journal.Tx, now time.Time, keep uint64, limit int) ([]Reaped, []record.Event, error) {
	dead, err := t.deadHolders(tx, true)
	if err != nil || len(dead) == 0 {
		return nil, nil, err
	}
	delete(dead, keep)
	tokens := make([]uint64, 0, len(dead))
	for token := range dead {
		tokens = append(tokens, token)
	}
	slices.Sort(tokens)
	var reaped []Reaped
	var evs []record.Event
	for _, token := range tokens {
		if limit > 0 && len(reaped) >= limit {
			break
		}
		rec, ok, err := leaseOf(tx, token)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		r, ev, err := reapOne(tx, rec, ReasonHolderDied, now)
		if err != nil {
			return nil, nil, err
		}
		reaped = append(reaped, r)
		evs = append(evs, ev)
	}
	return reaped, evs, nil
}

// leaseOf returns the task whose current lease is token's; ok is false
// if token holds none.
func leaseOf(tx journal.Tx, token uint64) (rec record.Task, ok bool, err error) {
	c, ok, err := tx.Claim(token)
	if err != nil || !ok {
		return rec, false, err
	}
	if rec, ok, err = tx.Task(c.Task); err != nil || !ok {
		return rec, false, err
	}
	return rec, rec.State == record.Claimed && rec.Lease != nil && rec.Lease.Token == token, nil
}

// reapAll is every reap a writer does before it claims or when asked:
// holders that died (but keep's, see reapDead), then leases that ran out.
func (t *Tree) reapAll(tx journal.Tx, now time.Time, keep uint64) ([]Reaped, []record.Event, error) {
	return t.reapUpTo(tx, now, keep, 0)
}

// reapUpTo is reapAll that stops after limit reaps (0: no limit), for
// catchUp's commits, each of which must fit one transaction of the store.
func (t *Tree) reapUpTo(tx journal.Tx, now time.Time, keep uint64, limit int) ([]Reaped, []record.Event, error) {
	reaped, evs, err := t.reapDead(tx, now, keep, limit)
	if err != nil {
		return nil, nil, err
	}
	if limit > 0 && len(reaped) >= limit {
		return reaped, evs, nil
	}
	more, moreEvs, err := reapExpired(tx, now, max(limit-len(reaped), 0))
	if err != nil {
		return nil, nil, err
	}
	return append(reaped, more...), append(evs, moreEvs...), nil
}

// diedOf explains, for `reap --dry-run`, the claims reapDead would free.
func (t *Tree) diedOf(tx journal.Tx, now time.Time) ([]Reaped, error) {
	dead, err := t.deadHolders(tx, false)
	if err != nil {
		return nil, err
	}
	var out []Reaped
	for token := range dead {
		if rec, ok, err := leaseOf(tx, token); err != nil {
			return nil, err
		} else if ok {
			r, err := reapOf(tx, rec, ReasonHolderDied, now)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Reaped) int { return cmp.Compare(a.Token, b.Token) })
	return out, nil
}
