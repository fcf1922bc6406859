package bolt

import (
	"fmt"
	"os"
	"sync"

	"github.com/fsnotify/fsnotify"
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
	w := &Watcher{w: fw, c: make(chan struct{}, 1)}
	go w.loop()
	return w, nil
}

// loop turns the file's events into signals until Close. A change of
// mode says nothing about the content; anything else (a write, the file
// removed or renamed by recover) does. A lost event (the queue
// overflowed) may have been a write: it signals too.
func (w *Watcher) loop() {
	events, errs := w.w.Events, w.w.Errors
	for events != nil || errs != nil {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
		case _, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
		}
		select {
		case w.c <- struct{}{}:
		default: // one pending wake-up is enough
		}
	}
}

// C is signalled after the journal changed.
func (w *Watcher) C() <-chan struct{} { return w.c }

// Close stops watching. Safe to call twice.
func (w *Watcher) Close() error {
	w.once.Do(func() { w.err = w.w.Close() })
	return w.err
}
