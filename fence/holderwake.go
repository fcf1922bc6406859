package fence

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal/record"
)

// Waking a lease's holder, not the whole tree.
//
// A keeper must learn soon when its lease changes under it: a revoke or a
// cancel, a heartbeat by its command with a shorter --ttl, its command
// settling the task itself. It used to watch the whole journal, so every
// commit of the tree woke every keeper of every process for a read of its
// lease: eight run --loop processes on one tree woke each other some
// fifteen thousand times a second, and a tenth of the machine's CPU went
// on learning that nothing had happened to them.
//
// A keeper whose claim was tied to its process in the claim's own commit
// (run: ClaimRequest.TieToProcess, see liveness.go) now hears only of its
// own process's leases. A commit that changes a held lease (an event from
// claimed, which carries the lease's token) appends a byte to the token's
// liveness files in .fence/live: hard links to their process's anchor,
// which that process watches (inotify IN_MODIFY). Nothing else writes to
// an anchor: linking, renaming and unlinking ties change its link count,
// not its content. A lease of this process's own is woken in the process,
// with no write.
//
// The append follows the commit: a writer that dies between the two, or a
// fencectl from before this, wakes nobody, and the keeper learns at its
// next check (CheckInterval, a second by default), as a keeper with no
// watch does. The token is what keeps the task safe; the wake only decides
// how soon the command hears of it.
//
// The anchor's size counts the appends. A keeper started after its claim
// committed (run --loop's task in hand starts its watch with its command)
// compares it with the size when the claim was tied, and reads its lease
// at once only if it grew: a change that landed in between is seen, and
// the usual case costs an fstat, not a read of the journal.

// holderWake is one Tree's watch on its anchors, fanned out to the keepers
// of its tied claims.
type holderWake struct {
	mu     sync.Mutex
	fd     int      // the inotify instance; 0 until the first anchor
	file   *os.File // fd, read through the runtime's poller
	err    error    // why there is no watch: keepers fall back to the journal's
	subs   map[*holderSub]struct{}
	closed bool
	// unheard holds the tokens whose lease this process changed while
	// none of its keepers listened (a keeper that starts its watch
	// later: see subscribe).
	unheard map[uint64]bool
}

// holderSub is one keeper's view of its process's wakes (a
// journal.Watcher).
type holderSub struct {
	hub   *holderWake
	token uint64
	c     chan struct{}
	once  sync.Once
}

func (s *holderSub) C() <-chan struct{} { return s.c }

// Close unsubscribes; the watch stays up for the Tree's next keeper.
func (s *holderSub) Close() error {
	s.once.Do(func() {
		s.hub.mu.Lock()
		delete(s.hub.subs, s)
		s.hub.mu.Unlock()
	})
	return nil
}

func (s *holderSub) signal() {
	select {
	case s.c <- struct{}{}:
	default: // one pending wake-up is enough
	}
}

// watchAnchor adds the anchor fd to the watch (set up by the first one).
// It runs before the anchor gets a name anyone else can find, so that no
// append to it goes unheard.
func (h *holderWake) watchAnchor(fd int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.err != nil {
		return
	}
	if h.file == nil {
		ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			h.err = &os.SyscallError{Syscall: "inotify_init1", Err: err}
			return
		}
		h.fd, h.file = ifd, os.NewFile(uintptr(ifd), "inotify")
		go h.loop(h.file)
	}
	// The descriptor's own path: the file this process holds, whatever
	// name it has or comes to have.
	if _, err := unix.InotifyAddWatch(h.fd, "/proc/self/fd/"+strconv.Itoa(fd), unix.IN_MODIFY); err != nil {
		h.err = &os.SyscallError{Syscall: "inotify_add_watch", Err: err}
	}
}

// loop wakes every subscribed keeper after each batch of appends (an
// overflowed queue reads as an event too): which lease changed is for
// each to read. A read that fails ends the watch: the keepers are woken
// once more, and later ones watch the journal instead.
func (h *holderWake) loop(f *os.File) {
	buf := make([]byte, 4096)
	for {
		_, err := f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return
		}
		h.mu.Lock()
		for s := range h.subs {
			s.signal()
		}
		if err != nil && h.err == nil {
			h.err = err
		}
		h.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// subscribe returns a keeper's wake for token, or nil if this Tree has no
// watch on its anchors (the keeper then watches the journal). missed says
// that this process changed the lease while nobody listened: the keeper
// must read it at once.
func (h *holderWake) subscribe(token uint64) (sub *holderSub, missed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.file == nil || h.err != nil || h.closed {
		return nil, false
	}
	s := &holderSub{hub: h, token: token, c: make(chan struct{}, 1)}
	if h.subs == nil {
		h.subs = map[*holderSub]struct{}{}
	}
	h.subs[s] = struct{}{}
	missed = h.unheard[token]
	delete(h.unheard, token)
	return s, missed
}

// signalToken wakes this process's keepers of token, or notes the change
// for the keeper still to subscribe.
func (h *holderWake) signalToken(token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	heard := false
	for s := range h.subs {
		if s.token == token {
			s.signal()
			heard = true
		}
	}
	if !heard {
		if h.unheard == nil {
			h.unheard = map[uint64]bool{}
		}
		h.unheard[token] = true
	}
}

// forget drops what was noted for token: its tie is gone, no keeper of
// it will subscribe.
func (h *holderWake) forget(token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.unheard, token)
}

// close ends the watch for good (Tree.Close): keepers still subscribed
// fall back to their check interval.
func (h *holderWake) close() {
	h.mu.Lock()
	f := h.file
	h.closed, h.file = true, nil
	h.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// wakeHolders tells the holders of the leases evs changed (see above):
// this process's keepers in the process, every other holder by an append
// to its liveness files. After the commit, before its callers hear of it:
// a `fencectl revoke` returns once the holder has been told. Best effort:
// a holder not told learns at its next check.
func (t *Tree) wakeHolders(evs []record.Event) {
	var tokens []uint64
	for _, ev := range evs {
		if ev.From == record.Claimed && ev.Token != 0 && !slices.Contains(tokens, ev.Token) {
			tokens = append(tokens, ev.Token)
		}
	}
	if len(tokens) == 0 {
		return
	}
	live := &t.batch.live
	foreign := tokens[:0:0]
	for _, tok := range tokens {
		if live.ties(tok) {
			live.wake.signalToken(tok)
		} else {
			foreign = append(foreign, tok)
		}
	}
	if len(foreign) > 0 {
		own := live.suffixes()
		appendToTies(t.metaDir, func(token uint64, suffix string) bool {
			return slices.Contains(foreign, token) && !slices.Contains(own, suffix)
		})
	}
}

// appendToTies appends a byte to every liveness file in .fence/live whose
// token and anchor suffix (its name's parts) want says. Only a tie is
// written to: a regular file that is the very anchor its name says, as
// scanHolders counts ties. A stray file, a symlink, a FIFO, or a hard
// link to some other file that a hand put there is left alone.
func appendToTies(metaDir string, want func(token uint64, suffix string) bool) {
	dfd, err := openLiveDir(metaDir, false)
	if err != nil {
		return
	}
	dir := os.NewFile(uintptr(dfd), liveDirName)
	defer dir.Close()
	names, _ := dir.Readdirnames(-1)
	for _, name := range names {
		tok, suffix, ok := strings.Cut(name, ".")
		if !ok {
			continue
		}
		suffix = strings.TrimSuffix(suffix, unstartedMark)
		n, err := strconv.ParseUint(tok, 10, 64)
		if err != nil || !want(n, suffix) {
			continue
		}
		var anchor unix.Stat_t
		if unix.Fstatat(dfd, anchorPrefix+suffix, &anchor, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && idOf(&st) == idOf(&anchor) {
			_, _ = unix.Write(fd, []byte{'\n'})
		}
		unix.Close(fd)
	}
}

// wakeAllHolders appends to every liveness file in .fence/live: recover
// replaced the journal, and every lease in it with it.
func wakeAllHolders(metaDir string) {
	appendToTies(metaDir, func(uint64, string) bool { return true })
}

// anchorGrew reports whether the tie's anchor was appended to since the
// claim was tied: a change to one of this process's leases may have been
// missed by a keeper not yet watching. True when it cannot tell.
func (p *ProcessTie) anchorGrew() bool {
	if p == nil || p.anchor == nil || p.anchorSize < 0 {
		return true
	}
	size, ok := p.live.size(p.anchor)
	return !ok || size != p.anchorSize
}
