package fsmirror

import (
	"bytes"
	"strings"

	"golang.org/x/sys/unix"
)

// MarkName is the file in .fence that names the last journal commit whose
// moves are known to be done.
//
// Every writer, right after taking the lock, must make sure the last
// commit's moves reached the tree (a crash can fall between commit and
// rename). Checking means decoding that commit's events and looking for each
// file: about a fifth of a claim's time under the lock. The writer that did
// the moves knows they are done, so after its directory fsyncs it writes the
// commit's identity here, and the next writer that finds the journal's head
// equal to the mark skips the check.
//
// The mark is a hint, never the truth: it is written after the moves are
// durable, so it can only be behind, never ahead. A lost, torn or odd mark
// (not a regular file, unreadable) reads as "" and costs one full check.
const MarkName = "mirrored"

// markSize is the mark file's fixed size: the mark, spaces, a newline.
// Overwriting a fixed-size record needs no truncate, which on ext4 waits
// for the old block to be freed, under the lock.
const markSize = 128

// ReadMark returns the mark, or "" if there is none or it cannot be read.
func (m *Mirror) ReadMark() string {
	dirfd, err := m.dirfd(Meta)
	if err != nil {
		return ""
	}
	fd, err := unix.Openat(dirfd, MarkName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ""
	}
	var buf [markSize + 1]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil || n != markSize || buf[markSize-1] != '\n' {
		return "" // torn, or not ours
	}
	line := bytes.TrimRight(buf[:markSize-1], " ")
	if bytes.IndexByte(line, '\n') >= 0 {
		return ""
	}
	return string(line)
}

// WriteMark records mark (one line, shorter than markSize). It is not
// fsynced: a mark lost in a crash only costs the next writer a full check.
// Failing to write it is not an error for the same reason; the stale mark
// is removed instead so that it cannot vouch for a later commit.
func (m *Mirror) WriteMark(mark string) {
	dirfd, err := m.dirfd(Meta)
	if err != nil {
		return
	}
	fd, err := unix.Openat(dirfd, MarkName, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		m.dropMark()
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return // an odd entry: ReadMark ignores it too
	}
	if len(mark) >= markSize || strings.ContainsAny(mark, "\n") {
		m.dropMark()
		return
	}
	line := make([]byte, markSize)
	copy(line, mark)
	for i := len(mark); i < markSize-1; i++ {
		line[i] = ' '
	}
	line[markSize-1] = '\n'
	if n, err := unix.Pwrite(fd, line, 0); err != nil || n != markSize {
		m.dropMark()
	}
}

// dropMark removes the mark, so that the next writer checks the last commit
// in full.
func (m *Mirror) dropMark() {
	if dirfd, err := m.dirfd(Meta); err == nil {
		_ = unix.Unlinkat(dirfd, MarkName, 0)
	}
}
