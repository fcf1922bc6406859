package fence

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
)

// One journal watch for every keeper of a Tree.
//
// A keeper learns of a revoke or a takeover through a watch on the
// journal. Each keeper used to set up an inotify instance of its own and
// close it when its task ended; closing an inotify instance waits for the
// kernel's fsnotify grace period (synchronize_srcu), 3 to 20 ms here,
// which `run --loop` paid between every two tasks: more than a no-op task
// costs altogether. A Tree on a bbolt journal now keeps one watch, set up
// by the first keeper's Start and closed by Tree.Close, and gives every
// keeper its own coalesced channel on it.
//
// The watch follows the journal's file, not its name: when the file is
// replaced (recover), the next keeper to start sees another inode and
// sets up a new watch, and every keeper is woken to re-read its lease.
// An etcd journal keeps a watch per keeper: it costs nothing to close,
// and one that dies (a lost leader) is not kept for the next task.

// sharedWatch fans one journal watch out to the keepers of a Tree.
type sharedWatch struct {
	mu       sync.Mutex
	w        journal.Watcher
	quit     chan struct{} // ends w's forwarder
	dev, ino uint64        // the journal file w watches
	subs     map[*watchSub]struct{}
	closed   bool
}

// watchSub is one keeper's view of the shared watch.
type watchSub struct {
	hub  *sharedWatch
	c    chan struct{}
	once sync.Once
}

func (s *watchSub) C() <-chan struct{} { return s.c }

// Close unsubscribes; the shared watch stays up for the next keeper.
func (s *watchSub) Close() error {
	s.once.Do(func() {
		s.hub.mu.Lock()
		delete(s.hub.subs, s)
		s.hub.mu.Unlock()
	})
	return nil
}

func (s *watchSub) signal() {
	select {
	case s.c <- struct{}{}:
	default: // one pending wake-up is enough
	}
}

// watchJournal returns a watch on the tree's journal for one keeper:
// signalled after every journal write from the moment it returns.
func (t *Tree) watchJournal() (journal.Watcher, error) {
	if t.store.Name() != "bbolt" || t.batch.writerSlot == nil {
		return t.store.Watch(t.metaDir)
	}
	var st unix.Stat_t
	if err := unix.Stat(t.store.Path(t.metaDir), &st); err != nil {
		return nil, err
	}
	h := &t.batch.watch
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return t.store.Watch(t.metaDir)
	}
	if h.w == nil || h.dev != uint64(st.Dev) || h.ino != st.Ino {
		// Set up before it is published: a keeper returned from here is
		// woken by every write after, never by a watch still to come.
		w, err := t.store.Watch(t.metaDir)
		if err != nil {
			return nil, err
		}
		if old := h.stopLocked(); old != nil {
			// The journal was replaced: the old watch hears nothing more.
			// Closing an inotify instance waits for the kernel's grace
			// period: nobody waits for it here.
			go old.Close()
			for s := range h.subs {
				s.signal()
			}
		}
		h.w, h.quit, h.dev, h.ino = w, make(chan struct{}), uint64(st.Dev), st.Ino
		if h.subs == nil {
			h.subs = map[*watchSub]struct{}{}
		}
		go h.forward(w, h.quit)
	}
	s := &watchSub{hub: h, c: make(chan struct{}, 1)}
	h.subs[s] = struct{}{}
	return s, nil
}

// forward passes every signal of w on to the keepers subscribed when it
// arrives. A write after a keeper subscribed is read from inotify after
// that, so its signal (or the pending one it is coalesced with, not yet
// taken from w) is taken here after the subscription, and reaches it.
func (h *sharedWatch) forward(w journal.Watcher, quit <-chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case <-w.C():
		}
		h.mu.Lock()
		for s := range h.subs {
			s.signal()
		}
		h.mu.Unlock()
	}
}

// stopLocked ends the current watch's forwarder and returns the watch,
// for the caller to close.
func (h *sharedWatch) stopLocked() journal.Watcher {
	w := h.w
	if w != nil {
		close(h.quit)
		h.w, h.quit = nil, nil
	}
	return w
}

// close ends the shared watch for good (Tree.Close); keepers still
// subscribed hear nothing more and fall back to their check interval.
func (h *sharedWatch) close() {
	h.mu.Lock()
	h.closed = true
	w := h.stopLocked()
	h.mu.Unlock()
	if w != nil {
		w.Close()
	}
}
