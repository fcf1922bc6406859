package fsmirror

import (
	"errors"
	"fmt"
	"io/fs"
)

// Exists reports whether a regular file named id is in dir. It never
// follows a symlink: an entry that is not a regular file gives false and a
// *NotRegularError, so the caller can report it as drift.
func (m *Mirror) Exists(dir Dir, id string) (bool, error) {
	if err := ValidateID(id); err != nil {
		return false, err
	}
	fd, err := m.dirfd(dir)
	if err != nil {
		return false, err
	}
	err = m.checkRegular(fd, dir, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// locateOrder is where Locate looks: the state directories, then the inbox.
var locateOrder = []Dir{Available, Waiting, Claimed, Done, Failed, Inbox}

// Locate finds task id in the state directories, then in the inbox. It
// returns the first directory holding a regular file named id and how many
// directories hold one: more than one is drift (a task in two places, as a
// crash between a move's fsyncs can leave, or one file under two names
// after a move by link cut short: see SameFile). Non-regular entries are
// not counted. If no directory holds it the error matches fs.ErrNotExist.
func (m *Mirror) Locate(id string) (Dir, int, error) {
	if err := ValidateID(id); err != nil {
		return "", 0, err
	}
	var first Dir
	n := 0
	for _, d := range locateOrder {
		ok, err := m.Exists(d, id)
		var nr *NotRegularError
		if err != nil && !errors.As(err, &nr) {
			return "", 0, fmt.Errorf("locate %s: %w", id, err)
		}
		if ok {
			if n == 0 {
				first = d
			}
			n++
		}
	}
	if n == 0 {
		return "", 0, fmt.Errorf("locate %s: no regular file in available, waiting, claimed, done, failed or inbox: %w", id, fs.ErrNotExist)
	}
	return first, n, nil
}
