package fsmirror

import (
	"fmt"
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
	fd, err := m.dirfd(dir)
	if err != nil {
		return nil, err
	}
	// inbox/ and .fence/tmp, in a long-lived process: see quiet.go.
	q := m.quietFor(dir)
	id, ok := m.dirID(dir)
	if q == nil || !ok {
		return m.readEntries(dir, fd)
	}
	if q.stillEmpty(dir, id) {
		return nil, nil
	}
	gen := q.beforeList(dir, fd, id)
	entries, err := m.readEntries(dir, fd)
	if err == nil {
		q.afterList(dir, id, gen, len(entries))
	}
	return entries, err
}

// readEntries reads the directory dir, held open as fd.
func (m *Mirror) readEntries(dir Dir, fd int) ([]Entry, error) {
	path := m.Path(dir, "")
	// A fresh descriptor for reading, so the kept one's offset never moves.
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("list: %w", &fs.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(rfd), path)
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	entries := make([]Entry, 0, len(des))
	for _, de := range des {
		entries = append(entries, Entry{Name: de.Name(), Kind: kindOfType(de.Type())})
	}
	return entries, nil
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
// Names starting with "." are skipped silently: by convention they are
// writes in progress (write ".name", then rename to "name"), and a task id
// never starts with ".".
func (m *Mirror) ScanInbox() (valid []string, rejected []Rejected, err error) {
	entries, err := m.List(Inbox)
	if err != nil {
		return nil, nil, fmt.Errorf("scan inbox: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name, ".") {
			continue
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
				continue
			}
			valid = append(valid, e.Name)
		}
	}
	return valid, rejected, nil
}
