package fsmirror

import (
	"errors"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Knowing that inbox/ and .fence/tmp are still empty without listing them.
//
// Every claim lists inbox/ (to adopt what was dropped there) and every
// writer lists .fence/tmp (to sweep what a dead process staged). Both
// are nearly always empty, but a directory never shrinks: once 100,000
// files were dropped into inbox/ and adopted (staged in .fence/tmp on the
// way), each listing reads megabytes of empty directory blocks, about
// 0.15 ms per listing at 100,000 and ten times that at a million, for
// every claim from then on.
//
// A long-lived process (the daemon, run --loop, mcp, serve) that found
// one of them empty watches it with inotify, and lists it again only once
// something was created in it or moved into it. The watch is set up
// before the listing that finds the directory empty, and is read (without
// waiting) after it: an entry made during the listing is in the queue
// then, and one made later is in it by the time anyone asks, since the
// kernel queues the event before the call that made the entry returns. A
// lost event (the queue overflowed) counts as an entry; so does a replaced
// directory (Refresh), whose watch is dropped.
//
// Only a directory that has grown (quietMinSize) is watched: listing a
// small one costs less than the inotify instance the watch takes from the
// user's limit (fs.inotify.max_user_instances, 128 by default), which the
// lease keepers of every long-lived process need too.
//
// Only where every writer runs on this host (bbolt trees, whose journal
// refuses network file systems): inotify does not see what another host
// does to a directory it shares.

// quietMinSize is the size from which a directory is worth watching:
// eight blocks, about a thousand entries once made.
var quietMinSize int64 = 32 << 10

// quiet is a Mirror's watch of its quiet directories.
type quiet struct {
	mu     sync.Mutex
	fd     int // the inotify instance; -1 before the first watch
	failed bool
	dirs   map[Dir]*quietDir
	// gen counts the reads that found events: a listing that begins and
	// ends at the same gen saw every entry made before it ended.
	gen uint64
	// listed counts the listings of watched directories actually made
	// (for tests).
	listed int
}

// quietDir is the state of one watched directory.
type quietDir struct {
	id    fileID // the directory the watch is on
	wd    int    // its watch descriptor; -1 if none
	lists int    // listings made so far (the watch comes with the second)
	empty bool   // a listing found nothing, and nothing came since
}

// WatchQuiet lets later listings of inbox/ and .fence/tmp skip reading a
// directory known to be still empty. Call it only where every writer of
// the tree runs on this host.
func (m *Mirror) WatchQuiet() {
	m.quietMu.Lock()
	defer m.quietMu.Unlock()
	if m.quiet == nil {
		m.quiet = &quiet{fd: -1, dirs: map[Dir]*quietDir{}}
	}
}

// quietFor returns the watch of dir, if dir is watched.
func (m *Mirror) quietFor(dir Dir) *quiet {
	m.quietMu.Lock()
	defer m.quietMu.Unlock()
	if m.quiet == nil || (dir != Inbox && dir != Staging) {
		return nil
	}
	return m.quiet
}

// stillEmpty reports whether dir, held open as fd with identity id, is
// known to be empty: nothing was made in it since a listing found it so.
func (q *quiet) stillEmpty(dir Dir, id fileID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dirs[dir]
	if d == nil || d.wd < 0 || d.id != id || !d.empty {
		return false
	}
	q.drain()
	return d.empty
}

// beforeList is called before a listing of dir: from the second one on,
// it watches the directory first. It returns the generation to give
// afterList.
func (q *quiet) beforeList(dir Dir, fd int, id fileID) uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dirs[dir]
	if d == nil || d.id != id {
		if d != nil && d.wd >= 0 && q.fd >= 0 {
			unix.InotifyRmWatch(q.fd, uint32(d.wd))
		}
		d = &quietDir{id: id, wd: -1}
		q.dirs[dir] = d
	}
	d.lists++
	if d.lists >= 2 && d.wd < 0 && !q.failed && grown(fd) {
		d.wd = q.watch(fd)
	}
	q.drain()
	return q.gen
}

// afterList is called after a listing of dir (identity id), begun at
// generation gen, that found n entries: the directory is known empty if
// it found none and no event came since it began (another listing may
// have read the events meanwhile: the generation tells).
func (q *quiet) afterList(dir Dir, id fileID, gen uint64, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.listed++
	d := q.dirs[dir]
	if d == nil || d.wd < 0 || d.id != id {
		return
	}
	q.drain()
	if q.gen == gen {
		d.empty = n == 0
	}
}

// grown reports whether the directory held open as fd has reached
// quietMinSize.
func grown(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Size >= quietMinSize
}

// watch adds a watch of the directory held open as fd, by the
// descriptor's own path (the directory this process holds, whatever its
// name is now), making the inotify instance first. It returns the watch
// descriptor, or -1 if inotify cannot be had (then nothing is skipped).
func (q *quiet) watch(fd int) int {
	if q.fd < 0 {
		ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			q.failed = true
			return -1
		}
		q.fd = ifd
	}
	const mask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	wd, err := unix.InotifyAddWatch(q.fd, "/proc/self/fd/"+strconv.Itoa(fd), mask)
	if err != nil {
		return -1
	}
	return wd
}

// drain reads every queued event without waiting. Any event marks both
// directories as not empty: which one it came from is not worth telling
// apart (a file staged in .fence/tmp costs one listing of inbox/). A read
// that fails ends the watching.
func (q *quiet) drain() {
	if q.fd < 0 {
		return
	}
	var buf [4096]byte
	for {
		n, err := unix.Read(q.fd, buf[:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return
		case err != nil || n <= 0:
			q.stop()
			return
		}
		q.gen++
		for _, d := range q.dirs {
			d.empty = false
		}
	}
}

// stop ends the watching: every later listing reads the directory.
func (q *quiet) stop() {
	if q.fd >= 0 {
		unix.Close(q.fd)
	}
	q.fd, q.failed = -1, true
	for _, d := range q.dirs {
		d.wd, d.empty = -1, false
	}
}

// close releases the inotify instance.
func (q *quiet) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stop()
}
