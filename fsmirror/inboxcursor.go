package fsmirror

import (
	"bytes"
	"strconv"

	"golang.org/x/sys/unix"
)

// Where the next bounded scan of inbox/ starts.
//
// A writer adopts at most a few hundred inbox files per turn of the lock
// (ScanInbox). Each turn used to start at the directory's first entry, so
// a few hundred files that can never be adopted as they are (ids a task
// already has, hard links, files another user owns) kept every file after
// them out of the tree for good: 1,000 such files in front of 20 new ones
// left 14 of the 20 unadopted after any number of claims (found from
// outside). A scan that stops at its bound now records the position of
// the entry it stopped at, and the next one starts there, wrapping to the
// start at the end: every entry is looked at within a few turns.
//
// The position is the directory's own (getdents' d_off, which lseek(2)
// takes back: a hash on ext4, an index on tmpfs), kept in memory by a
// long-lived process and in .fence/inbox-cursor for the next process. It
// is a hint: a lost, torn or stale one costs a scan from the start, and
// a position the directory no longer has is read from the start too. It
// is written only while inbox/ holds more than a turn takes, and never
// synced.

// cursorName is the cursor's file in .fence.
const cursorName = "inbox-cursor"

// cursorSize is the file's fixed size: the position, spaces, a newline.
const cursorSize = 24

// inboxFrom is where this process's next inbox scan starts.
func (m *Mirror) inboxFrom() int64 { return m.inboxPos.Load() }

// loadInboxCursor returns the position in .fence/inbox-cursor (0: none),
// once per process: after that, this process's own position is the one
// it goes on from.
func (m *Mirror) loadInboxCursor() int64 {
	if m.inboxLoaded.Swap(true) {
		return 0
	}
	dirfd, err := m.dirfd(Meta)
	if err != nil {
		return 0
	}
	fd, err := unix.Openat(dirfd, cursorName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if err != unix.ENOENT {
			m.cursorTrouble("cannot be read", err)
		}
		return 0
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		m.cursorTrouble("is not a regular file", nil)
		return 0
	}
	var buf [cursorSize + 1]byte
	if n, err := unix.Pread(fd, buf[:], 0); err != nil || n != cursorSize || buf[cursorSize-1] != '\n' {
		return 0
	}
	pos, err := strconv.ParseInt(string(bytes.TrimRight(buf[:cursorSize-1], " ")), 10, 64)
	if err != nil || pos < 0 {
		return 0
	}
	m.inboxSaved.Store(pos)
	return pos
}

// saveInboxCursor records pos as where the next scan starts: in memory,
// and in the file when it differs from what the file holds (as far as
// this process knows). Failing to write it is not an error: the next
// process starts from the start.
func (m *Mirror) saveInboxCursor(pos int64) {
	m.inboxPos.Store(pos)
	if !m.inboxLoaded.Load() && pos == 0 {
		return // never stopped, never read the file: nothing to undo
	}
	if m.inboxSaved.Load() == pos {
		return
	}
	dirfd, err := m.dirfd(Meta)
	if err != nil {
		return
	}
	fd, err := unix.Openat(dirfd, cursorName, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		m.cursorTrouble("cannot be written", err)
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		m.cursorTrouble("is not a regular file", nil)
		return
	}
	ownLikeParent(dirfd, cursorName)
	line := []byte(strconv.FormatInt(pos, 10))
	for len(line) < cursorSize-1 {
		line = append(line, ' ')
	}
	line = append(line, '\n')
	n, err := unix.Pwrite(fd, line, 0)
	if err == nil && n == cursorSize {
		m.inboxSaved.Store(pos)
		return
	}
	m.cursorTrouble("cannot be written", err)
}

// cursorTrouble records why the cursor could not be used (err may be
// nil), for InboxCursorTrouble.
func (m *Mirror) cursorTrouble(what string, err error) {
	msg := m.Path(Meta, cursorName) + " " + what
	if err != nil {
		msg += " (" + err.Error() + ")"
	}
	m.inboxTrouble.Store(&msg)
}

// InboxCursorTrouble says why the inbox cursor could not be read or
// written in this process ("" if it could): each new process then reads
// inbox/ from the same place, and files behind those left there may wait
// for good (found from outside: a directory, or an immutable file, in the
// cursor's place). The caller warns while inbox/ holds more than a turn.
func (m *Mirror) InboxCursorTrouble() string {
	if p := m.inboxTrouble.Load(); p != nil {
		return *p
	}
	return ""
}
