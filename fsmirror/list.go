package fsmirror

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is the type of a directory entry, as lstat sees it.
type Kind string

// Entry kinds. Only Regular entries are ever tasks.
const (
	Regular   Kind = "file"
	Symlink   Kind = "symlink"
	Directory Kind = "directory"
	FIFO      Kind = "fifo"
	Other     Kind = "other" // socket or device
)

func (k Kind) String() string { return string(k) }

// kindOf maps a stat mode to a Kind.
func kindOf(mode uint32) Kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return Regular
	case unix.S_IFLNK:
		return Symlink
	case unix.S_IFDIR:
		return Directory
	case unix.S_IFIFO:
		return FIFO
	}
	return Other
}

// Entry is one name found in a directory.
type Entry struct {
	Name string
	Kind Kind
}

// List returns every entry of dir, hidden ones included, sorted by name, for
// drift detection. Entries are typed from the directory listing itself
// (the d_type getdents reports; a filesystem that does not report it gets
// an lstat per entry), never opened or followed. A stat per entry made
// half of a replay's time at 1M tasks.
func (m *Mirror) List(dir Dir) ([]Entry, error) {
	entries, err := m.Entries(dir)
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return entries, err
}

// Entries is List in the directory's own order: for a caller that looks
// every entry up by name and needs no order (sorting a million names made
// a tenth of a replay's time at 1M tasks).
func (m *Mirror) Entries(dir Dir) ([]Entry, error) {
	var entries []Entry
	_, err := m.scan(dir, func(e Entry) bool {
		entries = append(entries, e)
		return true
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// scan calls visit for the entries of dir in the directory's own order,
// until visit returns false (stopped) or none is left.
func (m *Mirror) scan(dir Dir, visit func(Entry) bool) (stopped bool, err error) {
	fd, err := m.dirfd(dir)
	if err != nil {
		return false, err
	}
	// inbox/ and .fence/tmp, in a long-lived process: see quiet.go.
	q := m.quietFor(dir)
	id, ok := m.dirID(dir)
	if q == nil || !ok {
		_, stopped, err = m.readEntries(dir, fd, visit)
		return stopped, err
	}
	if q.stillEmpty(dir, id) {
		return false, nil
	}
	gen := q.beforeList(dir, fd, id)
	n, stopped, err := m.readEntries(dir, fd, visit)
	if err == nil {
		q.afterList(dir, id, gen, n)
	}
	return stopped, err
}

// readEntries reads the directory dir, held open as fd, a few hundred
// entries at a time, calling visit for each until it returns false; n is
// how many it saw.
func (m *Mirror) readEntries(dir Dir, fd int, visit func(Entry) bool) (n int, stopped bool, err error) {
	path := m.Path(dir, "")
	// A fresh descriptor for reading, so the kept one's offset never moves.
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false, fmt.Errorf("list: %w", &fs.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(rfd), path)
	defer f.Close()
	for {
		des, err := f.ReadDir(512)
		for _, de := range des {
			n++
			if !visit(Entry{Name: de.Name(), Kind: kindOfType(de.Type())}) {
				return n, true, nil
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(des) == 0) {
			return n, false, nil
		}
		if err != nil {
			return n, false, fmt.Errorf("list: %w", err)
		}
	}
}

// kindOfType maps a directory entry's type bits to a Kind.
func kindOfType(t fs.FileMode) Kind {
	switch {
	case t&fs.ModeSymlink != 0:
		return Symlink
	case t.IsDir():
		return Directory
	case t&fs.ModeNamedPipe != 0:
		return FIFO
	case t.IsRegular():
		return Regular
	}
	return Other
}

// Rejected is an inbox entry that cannot be adopted, and why.
type Rejected struct {
	Name string
	Kind Kind
	Why  string
}

// ScanInbox lists inbox/ and splits it into valid entries (regular files
// whose names are valid ids, sorted), ready for Move(id, Inbox, Available),
// and rejected ones (symlinks, FIFOs, directories, devices, invalid names)
// with the reason. It never opens an entry, so a FIFO cannot block it, and
// never deletes or moves anything: rejected entries stay for the user to fix.
//
// It reads no further than the first most valid entries (0: no bound),
// and more says it stopped there: a writer adopts a bounded number of
// files per turn of the tree's lock, so that a drop of a million files
// neither keeps every other writer out for minutes nor takes memory and
// descriptors in proportion (found from outside).
//
// Names starting with "." are skipped silently: by convention they are
// writes in progress (write ".name", then rename to "name"), and a task id
// never starts with ".".
func (m *Mirror) ScanInbox(most int) (valid []string, rejected []Rejected, more bool, err error) {
	more, err = m.scan(Inbox, func(e Entry) bool {
		if strings.HasPrefix(e.Name, ".") {
			return true
		}
		if most > 0 && len(valid) == most {
			return false // an entry past the bound: there is more
		}
		switch {
		case e.Kind == Symlink:
			rejected = append(rejected, Rejected{e.Name, e.Kind, "symlink: refused, never followed"})
		case e.Kind == Other:
			rejected = append(rejected, Rejected{e.Name, e.Kind, "other: not a regular file (socket or device)"})
		case e.Kind != Regular:
			rejected = append(rejected, Rejected{e.Name, e.Kind, string(e.Kind) + ": not a regular file"})
		default:
			if err := ValidateID(e.Name); err != nil {
				rejected = append(rejected, Rejected{e.Name, e.Kind, err.Error()})
				return true
			}
			valid = append(valid, e.Name)
		}
		return true
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("scan inbox: %w", err)
	}
	slices.Sort(valid)
	slices.SortFunc(rejected, func(a, b Rejected) int { return strings.Compare(a.Name, b.Name) })
	return valid, rejected, more, nil
}
