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
// holder also keeps a liveness file, .fence/live/<token>.<holder>: a hard
// link to its process's anchor (liveAnchor), on which it holds an
// exclusive flock for as long as its process lives (and its Tree is
// open). The kernel drops the lock when the process dies, however it
// dies: every reap (each claim, `reap`) tries the lock, and a claim all
// of whose liveness files can be locked has no live holder: it is reaped
// at once, reason "holder died", and the attempt counts.
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

// holdLiveness ties the claim of token to this process: it links the
// process's liveness anchor (see liveAnchor), a file locked before it
// got any name a reaper reads, under the token's name: one link() per
// claim. The anchor is opened close-on-exec, so that no command this
// process starts keeps it alive. release removes the link.
func (t *Tree) holdLiveness(token uint64) (release func(), err error) {
	dir := filepath.Join(t.metaDir, liveDirName)
	for range 2 {
		a, err := t.batch.live.get(dir)
		if err != nil {
			return nil, err
		}
		name := filepath.Join(dir, strconv.FormatUint(token, 10)+"."+a.suffix)
		err = unix.Linkat(unix.AT_FDCWD, a.path, unix.AT_FDCWD, name, 0)
		if err == nil {
			return func() { os.Remove(name) }, nil
		}
		if err != unix.ENOENT {
			return nil, &os.LinkError{Op: "link", Old: a.path, New: name, Err: err}
		}
		// The anchor's name is gone (a hand cleared .fence/live): a new
		// anchor; the old one stays locked for the claims linked to it.
		t.batch.live.lost(a)
	}
	return nil, fmt.Errorf("liveness anchor in %s vanished twice", dir)
}

// liveAnchor is the one locked file behind every liveness file of this
// Tree's claims: each claim's file is a hard link to it, named
// <token>.<suffix>, all with the anchor's suffix. A reaper tries one
// lock per suffix, not one per claim (see scanHolders): a process that
// holds hundreds of claims (run --jobs, a library) costs one open, not
// hundreds, in every claim's scan. The anchor is locked before it gets
// its name, .anchor-<suffix>, as the links are: an anchor a reaper can
// lock was left by a process that died, and is removed at once.
type liveAnchor struct {
	mu      sync.Mutex
	current *anchor
	all     []*anchor // every anchor made, kept open (locked) until close
}

// anchorPrefix begins the name of a liveness anchor in .fence/live.
const anchorPrefix = ".anchor-"

type anchor struct {
	fd           int
	path, suffix string
}

// get returns the current anchor, making one in dir first if need be.
func (l *liveAnchor) get(dir string) (*anchor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current != nil {
		return l.current, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	tmp := filepath.Join(dir, ".tmp-"+suffix)
	path := filepath.Join(dir, anchorPrefix+suffix)
	fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	if err := flockRetry(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		os.Remove(tmp)
		return nil, &os.PathError{Op: "lock", Path: tmp, Err: err}
	}
	if err := os.Rename(tmp, path); err != nil {
		unix.Close(fd)
		os.Remove(tmp)
		return nil, err
	}
	l.current = &anchor{fd: fd, path: path, suffix: suffix}
	l.all = append(l.all, l.current)
	return l.current, nil
}

// lost forgets a as the current anchor (its name is gone).
func (l *liveAnchor) lost(a *anchor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == a {
		l.current = nil
	}
}

// close lets every anchor go: the claims still linked to them count as
// their holder's death from now on, as when the process ends. Each
// anchor's own name is removed before its lock goes.
func (l *liveAnchor) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.all {
		os.Remove(a.path)
		unix.Close(a.fd)
	}
	l.current, l.all = nil, nil
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
	bySuffix := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if suffix, ok := strings.CutPrefix(name, anchorPrefix); ok {
			if tidy && !liveSuffix(bySuffix, suffix, path) {
				os.Remove(path) // its process is gone
			}
			continue
		}
		if strings.HasPrefix(name, ".tmp-") {
			if info, err := e.Info(); tidy && err == nil && time.Since(info.ModTime()) > liveTmpAge && !locked(path) {
				os.Remove(path)
			}
			continue
		}
		tok, suffix, ok := strings.Cut(name, ".")
		token, err := strconv.ParseUint(tok, 10, 64)
		if !ok || err != nil || !e.Type().IsRegular() {
			continue // not ours: left alone
		}
		files[token] = append(files[token], path)
		if liveSuffix(bySuffix, suffix, path) {
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

// liveSuffix reports whether the holder of the liveness files of suffix
// lives, trying path's lock unless memo knows: the files of one suffix
// are links to one anchor (liveAnchor), and one lock tells for all.
func liveSuffix(memo map[string]bool, suffix, path string) bool {
	live, tried := memo[suffix]
	if !tried {
		live = locked(path)
		memo[suffix] = live
	}
	return live
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
