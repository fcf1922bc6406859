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
	// ReasonDiedUnstarted releases, with no attempt counted, a claim
	// whose holder died before it started working on it (a task run
	// --loop claimed ahead of its command: see ProcessTie.Started).
	ReasonDiedUnstarted = "holder died before starting it"
)

// unstartedMark ends the name of a tie whose claim no work has started
// under yet: <token>.<suffix>.unstarted. A fencectl from before it reads
// no tie there, and leaves such a claim to its lease.
const unstartedMark = ".unstarted"

// death is what a scan learns of a claim whose holder is gone: whether
// the holder had started working on it (every tie of the token still
// marked unstarted: it had not).
type death struct{ unstarted bool }

// liveTmpAge is how old an unlocked temporary liveness file must be before
// a reaper removes it: younger, it may be one a holder is about to lock.
const liveTmpAge = time.Minute

// openLiveDir opens .fence/live for *at calls, never through a symlink:
// a live that is not a directory (a symlink a hand or a hostile process
// put there) is a *LiveDirError, and nothing in it, or where it points,
// is read, locked or removed. With create, a missing live is made.
func openLiveDir(metaDir string, create bool) (int, error) {
	fd, err := openPrivateDir(metaDir, liveDirName, 0o700, create)
	if errors.Is(err, errNotPrivateDir) {
		return -1, &LiveDirError{Path: filepath.Join(metaDir, liveDirName)}
	}
	return fd, err
}

// errNotPrivateDir is openPrivateDir's refusal of a name that is not a
// directory (a symlink, a file).
var errNotPrivateDir = errors.New("not a directory (a symlink or a file); fencectl does not follow it: remove it, and the next command that needs it makes it again")

// openPrivateDir opens the directory name in .fence (live, requests) for
// *at calls, never through a symlink; with create, a missing one is made
// with mode.
func openPrivateDir(metaDir, name string, mode uint32, create bool) (int, error) {
	dir := filepath.Join(metaDir, name)
	for {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			return fd, nil
		case err == unix.ENOENT && create:
			if err := unix.Mkdir(dir, mode); err != nil && err != unix.EEXIST {
				return -1, &os.PathError{Op: "mkdir", Path: dir, Err: err}
			}
			create = false // once: one that vanishes again is reported
			continue
		case err == unix.ELOOP || err == unix.ENOTDIR:
			return -1, &os.PathError{Op: "open", Path: dir, Err: errNotPrivateDir}
		}
		return -1, &os.PathError{Op: "open", Path: dir, Err: err}
	}
}

// LiveDirError means .fence/live is not a directory (a symlink, a file):
// no claim is tied to its process and no holder's death is looked for
// (leases still run out at their TTL) until it is removed.
type LiveDirError struct{ Path string }

func (e *LiveDirError) Error() string {
	return fmt.Sprintf("%s is not a directory (a symlink or a file; fencectl does not follow it): claims are not tied to their runs, so a dead run's task waits for its lease to run out; remove it and the next run makes it again", e.Path)
}

// holdLiveness ties the claim of token to this process: it links the
// process's liveness anchor (see liveAnchor), a file locked before it
// got any name a reaper reads, under the token's name: one link() per
// claim. The anchor is opened close-on-exec, so that no command this
// process starts keeps it alive. release removes the link.
func (t *Tree) holdLiveness(token uint64) (release func(), err error) {
	live := &t.batch.live
	name, _, _, err := live.tie(t.metaDir, token, false)
	if err != nil {
		return nil, err
	}
	return func() {
		unlinkLive(t.metaDir, name)
		live.untied(token)
	}, nil
}

// AnchorFile returns this Tree's liveness anchor (made now if need be)
// as a file of its own that shares the anchor's lock: while any process
// holds it open, the claims tied to this Tree have a live holder. run
// hands it to its guard, so that a SIGKILLed run's tasks are not reaped
// as "holder died" until the guard has killed what the command left. The
// caller closes it; a copy handed to a child keeps the lock after that.
func (t *Tree) AnchorFile() (*os.File, error) {
	// Made only where this process may write: root's run on a user's
	// tree made .fence/live as root's before its claim was refused.
	if err := t.refuseForeign(); err != nil {
		return nil, err
	}
	l := &t.batch.live
	dfd, err := openLiveDir(t.metaDir, true)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	l.mu.Lock()
	defer l.mu.Unlock()
	a, err := l.get(dfd)
	if err != nil {
		return nil, err
	}
	fd, err := unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "dup", Path: a.name, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(t.metaDir, liveDirName, a.name)), nil
}

// tieClaim ties the claim of token to this process as holdLiveness
// does; with unstarted, marked so until the tie's Started: should the
// process die before then, the claim is released with no attempt counted
// (nothing was run under it), not reaped as an attempt.
func (t *Tree) tieClaim(token uint64, unstarted bool) (*ProcessTie, error) {
	live := &t.batch.live
	name, a, size, err := live.tie(t.metaDir, token, unstarted)
	if err != nil {
		return nil, err
	}
	return &ProcessTie{metaDir: t.metaDir, name: name, live: live, token: token, anchor: a, anchorSize: size}, nil
}

// liveAnchor is the one locked file behind every liveness file of this
// Tree's claims: each claim's file is a hard link to it, named
// <token>.<suffix>, all with the anchor's suffix. A reaper tries one
// lock per anchor, not one per claim (see scanHolders): a process that
// holds hundreds of claims (run --jobs, a library) costs one open, not
// hundreds, in every claim's scan. The anchor is locked before it gets
// its name, .anchor-<suffix>, as the links are. A file counts as a
// claim's tie only if it is a link to the anchor its name says: a stray
// file, or one restored from a backup, ties nothing and is left alone.
type liveAnchor struct {
	mu      sync.Mutex
	current *anchor
	all     []*anchor // every anchor made, kept open (locked) until close
	// tied counts this Tree's ties by token: a lease tied here is woken
	// in the process (holderwake.go).
	tied map[uint64]int
	// wake is the watch on the anchors (holderwake.go).
	wake holderWake
}

// anchorPrefix begins the name of a liveness anchor in .fence/live.
const anchorPrefix = ".anchor-"

type anchor struct {
	fd           int
	name, suffix string
}

// tie links the current anchor (made first if need be) as token's
// liveness file in .fence/live under metaDir, marked unstarted if asked,
// and returns the link's name, the anchor and its size then (see
// ProcessTie.anchorGrew).
func (l *liveAnchor) tie(metaDir string, token uint64, unstarted bool) (string, *anchor, int64, error) {
	dfd, err := openLiveDir(metaDir, true)
	if err != nil {
		return "", nil, 0, err
	}
	defer unix.Close(dfd)
	l.mu.Lock() // against close, which removes an anchor with no links
	defer l.mu.Unlock()
	for range 2 {
		a, err := l.get(dfd)
		if err != nil {
			return "", nil, 0, err
		}
		name := strconv.FormatUint(token, 10) + "." + a.suffix
		if unstarted {
			name += unstartedMark
		}
		err = unix.Linkat(dfd, a.name, dfd, name, 0)
		if err == nil {
			var st unix.Stat_t
			size := int64(-1) // unknown: a keeper reads its lease at once
			if unix.Fstat(a.fd, &st) == nil {
				size = st.Size
			}
			if l.tied == nil {
				l.tied = map[uint64]int{}
			}
			l.tied[token]++
			return name, a, size, nil
		}
		if err != unix.ENOENT {
			return "", nil, 0, &os.LinkError{Op: "link", Old: a.name, New: name, Err: err}
		}
		// The anchor's name is gone (a hand cleared .fence/live, or made
		// it anew): a new anchor; the old one stays locked for the claims
		// linked to it.
		l.current = nil
	}
	return "", nil, 0, fmt.Errorf("liveness anchor in %s vanished twice", filepath.Join(metaDir, liveDirName))
}

// untied forgets one tie of token (see tied).
func (l *liveAnchor) untied(token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tied[token]--; l.tied[token] <= 0 {
		delete(l.tied, token)
		l.wake.forget(token)
	}
}

// ties reports whether token is tied in this process.
func (l *liveAnchor) ties(token uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tied[token] > 0
}

// suffixes returns the suffixes of this process's anchors: their ties'
// names end with them.
func (l *liveAnchor) suffixes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.all))
	for i, a := range l.all {
		out[i] = a.suffix
	}
	return out
}

// size returns the size of anchor a, or false if it is closed.
func (l *liveAnchor) size(a *anchor) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st unix.Stat_t
	if a.fd < 0 || unix.Fstat(a.fd, &st) != nil {
		return 0, false
	}
	return st.Size, true
}

// unlinkLive removes name from .fence/live, never through a symlink.
func unlinkLive(metaDir, name string) {
	dfd, err := openLiveDir(metaDir, false)
	if err != nil {
		return
	}
	defer unix.Close(dfd)
	_ = unix.Unlinkat(dfd, name, 0)
}

// renameLive renames a tie in .fence/live, never through a symlink. No
// fsync: after a crash every tie is dead anyway.
func renameLive(metaDir, from, to string) error {
	dfd, err := openLiveDir(metaDir, false)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Renameat(dfd, from, dfd, to); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// get returns the current anchor, making one in the directory dfd first
// if need be. l.mu is held.
func (l *liveAnchor) get(dfd int) (*anchor, error) {
	if l.current != nil {
		return l.current, nil
	}
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	tmp := ".tmp-" + suffix
	name := anchorPrefix + suffix
	fd, err := unix.Openat(dfd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	if err := flockRetry(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		_ = unix.Unlinkat(dfd, tmp, 0)
		return nil, &os.PathError{Op: "lock", Path: tmp, Err: err}
	}
	l.wake.watchAnchor(fd) // before any tie of it has a name
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		unix.Close(fd)
		_ = unix.Unlinkat(dfd, tmp, 0)
		return nil, &os.LinkError{Op: "rename", Old: tmp, New: name, Err: err}
	}
	l.current = &anchor{fd: fd, name: name, suffix: suffix}
	l.all = append(l.all, l.current)
	return l.current, nil
}

// close lets every anchor go: the claims still linked to them count as
// their holder's death from now on, as when the process ends. An anchor
// no claim is linked to any more loses its name first; one that still
// has links keeps it, so that a reaper finds it unlocked (and tidies it
// once its claims are reaped).
func (l *liveAnchor) close(metaDir string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	dfd, err := openLiveDir(metaDir, false)
	for _, a := range l.all {
		var st unix.Stat_t
		if err == nil && unix.Fstat(a.fd, &st) == nil && st.Nlink == 1 {
			_ = unix.Unlinkat(dfd, a.name, 0)
		}
		unix.Close(a.fd)
		a.fd = -1
	}
	if err == nil {
		unix.Close(dfd)
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
func (t *Tree) deadHolders(tx journal.Tx, tidy bool) (map[uint64]death, error) {
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
	dead map[uint64]death
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
func (h *holderScan) get(tx journal.Tx) (map[uint64]death, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done || h.tx == nil || h.tx != tx {
		return nil, false
	}
	return maps.Clone(h.dead), true
}

// put keeps dead as tx's scan, if tx is the group's transaction.
func (h *holderScan) put(tx journal.Tx, dead map[uint64]death) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tx != nil && h.tx == tx {
		h.dead, h.done = maps.Clone(dead), true
	}
}

// fileID is a file's identity: two names with one fileID are links to
// one file.
type fileID struct{ dev, ino uint64 }

// liveHolder is what a scan learns of one anchor.
type liveHolder struct {
	id    fileID
	name  string
	live  bool
	links int // tie links left to it
}

// scanHolders is deadHolders without the group's scan. It reads
// .fence/live through a descriptor opened without following a symlink
// (openLiveDir), stats every name without following one either, and
// opens nothing but regular files. A live that is not a directory is
// left alone: no holder is found dead there.
func (t *Tree) scanHolders(tx journal.Tx, tidy bool) (map[uint64]death, error) {
	dfd, err := openLiveDir(t.metaDir, false)
	if errors.Is(err, os.ErrNotExist) || errors.As(err, new(*LiveDirError)) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	dir := os.NewFile(uintptr(dfd), filepath.Join(t.metaDir, liveDirName))
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	// The anchors first: a link is a tie only if it is the anchor its
	// name says (the same file), and one lock tells for all its links.
	holders := map[string]*liveHolder{}
	for _, name := range names {
		suffix, ok := strings.CutPrefix(name, anchorPrefix)
		if !ok {
			continue
		}
		if id, live, ok := lockedAt(dfd, name); ok {
			holders[suffix] = &liveHolder{id: id, name: name, live: live}
		}
	}
	alive := map[uint64]bool{}
	files := map[uint64][]tieFile{}
	for _, name := range names {
		if strings.HasPrefix(name, anchorPrefix) {
			continue
		}
		if strings.HasPrefix(name, ".tmp-") {
			if tidy && staleTmp(dfd, name) {
				_ = unix.Unlinkat(dfd, name, 0)
			}
			continue
		}
		tok, suffix, ok := strings.Cut(name, ".")
		suffix, unstarted := strings.CutSuffix(suffix, unstartedMark)
		token, err := strconv.ParseUint(tok, 10, 64)
		h := holders[suffix]
		if !ok || err != nil || h == nil {
			continue // not a tie: left alone
		}
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || idOf(&st) != h.id {
			continue // not a link to its anchor: not a tie, left alone
		}
		h.links++
		files[token] = append(files[token], tieFile{name, suffix, unstarted})
		if h.live {
			alive[token] = true
		}
	}
	dead := map[uint64]death{}
	for token, ties := range files {
		if alive[token] {
			continue
		}
		if _, current, err := leaseOf(tx, token); err != nil {
			return nil, err
		} else if current {
			dead[token] = death{unstarted: !slices.ContainsFunc(ties, func(f tieFile) bool { return !f.unstarted })}
			continue
		}
		for _, f := range ties {
			if tidy && unix.Unlinkat(dfd, f.name, 0) == nil {
				holders[f.suffix].links--
			}
		}
	}
	for _, h := range holders {
		if tidy && !h.live && h.links == 0 {
			_ = unix.Unlinkat(dfd, h.name, 0) // its process is gone, and its claims are over
		}
	}
	return dead, nil
}

// tieFile is one tie a scan found: its name, its anchor's suffix, and
// whether it is marked unstarted.
type tieFile struct {
	name, suffix string
	unstarted    bool
}

func idOf(st *unix.Stat_t) fileID { return fileID{dev: uint64(st.Dev), ino: st.Ino} }

// lockedAt opens name in dfd, if it is a regular file, and reports its
// identity and whether its holder may still live: another open file
// holds its lock, or the file was unlinked between our open and our lock
// (a holder that is done removes its anchor's name before its lock goes).
// Only a file still linked whose lock we get was left by a process that
// died. ok is false for anything else (not a regular file, gone, not
// openable): not this function's to judge.
func lockedAt(dfd int, name string) (id fileID, live, ok bool) {
	var st unix.Stat_t
	if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return id, false, false
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return id, false, false
	}
	defer unix.Close(fd)
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return id, false, false
	}
	id = idOf(&st)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return id, true, true
	}
	return id, unix.Fstat(fd, &st) != nil || st.Nlink == 0, true
}

// staleTmp reports whether name, a temporary liveness file, is a regular
// file older than liveTmpAge that nobody holds locked.
func staleTmp(dfd int, name string) bool {
	var st unix.Stat_t
	if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || time.Since(time.Unix(st.Mtim.Unix())) <= liveTmpAge {
		return false
	}
	_, live, ok := lockedAt(dfd, name)
	return ok && !live
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
		reap := reapOne
		if dead[token].unstarted {
			reap = releaseUnstarted
		}
		r, ev, err := reap(tx, rec, ReasonHolderDied, now)
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
	for token, d := range dead {
		if rec, ok, err := leaseOf(tx, token); err != nil {
			return nil, err
		} else if ok && d.unstarted {
			out = append(out, unstartedOf(rec))
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

// releaseUnstarted frees rec, whose holder died before it started working
// on it: released to available/, reason ReasonDiedUnstarted, with no
// attempt counted, as run's own release of a task it claimed ahead and
// did not run. (reason is reapDead's, for the signature of reapOne.)
func releaseUnstarted(tx journal.Tx, rec record.Task, _ string, now time.Time) (Reaped, record.Event, error) {
	ev := endEvent(record.EvRelease, rec, record.Available, "", ReasonDiedUnstarted, now)
	_, ev, err := commit(tx, &rec, ev)
	return unstartedOf(rec), ev, err
}

// unstartedOf explains releaseUnstarted's release of rec.
func unstartedOf(rec record.Task) Reaped {
	return Reaped{
		Task: rec.ID, Holder: rec.Lease.Agent, Token: rec.Lease.Token,
		Reason: ReasonDiedUnstarted, Attempts: rec.Attempts,
		MaxAttempts: rec.MaxAttempts, To: record.Available,
	}
}
