package bolt

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// Watcher reports that the journal file was written to, through inotify
// (by way of fsnotify): a process keeping a lease learns of a revoke or a
// takeover by another process within milliseconds, without polling the
// journal.
type Watcher struct {
	w    *fsnotify.Watcher
	c    chan struct{}
	once sync.Once
	err  error
	// path is the journal, and dev and ino the file watched: compact
	// (Reclaim) renames a new file over it, which the old file hears only
	// as a change of its link count; then the watch moves to the new one.
	path     string
	dev, ino uint64
}

// Watch starts watching the journal in dir. C receives (coalesced) after
// every write; the receiver then re-reads what it cares about. The
// journal must be a regular file: a symbolic link in its place is
// refused rather than followed (fsnotify has no IN_DONT_FOLLOW).
func Watch(dir string) (*Watcher, error) {
	path := Path(dir)
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("watch journal: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("watch journal %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch journal: %w", err)
	}
	if err := fw.Add(path); err != nil {
		fw.Close()
		return nil, fmt.Errorf("watch journal %s: %w", path, err)
	}
	w := &Watcher{w: fw, c: make(chan struct{}, 1), path: path}
	w.dev, w.ino, _ = fileID(path)
	go w.loop()
	return w, nil
}

// loop turns the file's events into signals until Close. A change of
// mode says nothing about the content; anything else (a write, the file
// removed or renamed by recover) does. A lost event (the queue
// overflowed) may have been a write: it signals too.
//
// After each signal it stops reading for CoalesceWindow. One commit is a
// dozen or more writes to the file (a page each, then the meta page),
// and every other process watching the tree was woken for each of them:
// eight run --loop processes spent a quarter of their CPU reading inotify
// events. While loop sleeps, the kernel folds the writes that come into
// one queued event (inotify merges an event identical to the last one
// queued), which the next round takes with whatever else is pending, for
// one more signal. The first write after a quiet spell is signalled at
// once; a later one at most CoalesceWindow late, well inside the lease
// keeper's own spacing of checks.
func (w *Watcher) loop() {
	events, errs := w.w.Events, w.w.Errors
	for events != nil || errs != nil {
		var changed bool
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			changed = w.says(ev)
		case _, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			changed = true
		}
		// Take what else is pending now: one signal covers it all.
		for more := true; more; {
			select {
			case ev, ok := <-events:
				if !ok {
					events, more = nil, false
					continue
				}
				changed = w.says(ev) || changed
			case _, ok := <-errs:
				if !ok {
					errs, more = nil, false
					continue
				}
				changed = true
			default:
				more = false
			}
		}
		if !changed {
			continue
		}
		select {
		case w.c <- struct{}{}:
		default: // one pending wake-up is enough
		}
		time.Sleep(CoalesceWindow)
	}
}

// CoalesceWindow is how long a Watcher stops reading events after a
// signal (see loop).
const CoalesceWindow = 2 * time.Millisecond

// says reports whether ev may be a change of the journal's content.
func (w *Watcher) says(ev fsnotify.Event) bool {
	return ev.Op != fsnotify.Chmod || w.replaced()
}

// replaced reports whether another file is at the journal's path now (a
// compaction's rename), and if so watches that one instead.
func (w *Watcher) replaced() bool {
	dev, ino, err := fileID(w.path)
	if err != nil || dev == w.dev && ino == w.ino {
		return false
	}
	_ = w.w.Remove(w.path)
	if w.w.Add(w.path) == nil {
		w.dev, w.ino = dev, ino
	}
	return true
}

func fileID(path string) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	return uint64(st.Dev), st.Ino, nil
}

// C is signalled after the journal changed.
func (w *Watcher) C() <-chan struct{} { return w.c }

// Close stops watching. Safe to call twice.
func (w *Watcher) Close() error {
	w.once.Do(func() { w.err = w.w.Close() })
	return w.err
}
