package bolt

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Watcher reports that the journal file was written to, through inotify:
// a process keeping a lease learns of a revoke or a takeover by another
// process within milliseconds, without polling the journal.
type Watcher struct {
	f    *os.File
	c    chan struct{}
	once sync.Once
}

// Watch starts watching the journal in dir. C receives (coalesced) after
// every write; the receiver then re-reads what it cares about.
func Watch(dir string) (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch journal: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, Path(dir), unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_DONT_FOLLOW); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch journal %s: %w", Path(dir), err)
	}
	w := &Watcher{f: os.NewFile(uintptr(fd), "inotify"), c: make(chan struct{}, 1)}
	go w.loop()
	return w, nil
}

func (w *Watcher) loop() {
	buf := make([]byte, 4096)
	for {
		if _, err := w.f.Read(buf); err != nil {
			return // closed
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
	var err error
	w.once.Do(func() { err = w.f.Close() })
	return err
}
