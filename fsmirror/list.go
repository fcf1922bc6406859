package fsmirror

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	_, stopped, err = m.scanFrom(dir, 0, visit)
	return stopped, err
}

// scanFrom is scan from the position pos in the directory's own order (0:
// its start; otherwise a position an earlier scanFrom returned). next is
// where the entry visit refused is (so it is read again from there), or 0
// when the scan reached the end.
func (m *Mirror) scanFrom(dir Dir, pos int64, visit func(Entry) bool) (next int64, stopped bool, err error) {
	fd, err := m.dirfd(dir)
	if err != nil {
		return 0, false, err
	}
	// inbox/ and .fence/tmp, in a long-lived process: see quiet.go. Only
	// a listing from the start can find a directory empty.
	q := m.quietFor(dir)
	id, ok := m.dirID(dir)
	if q == nil || !ok || pos != 0 {
		_, next, stopped, err = m.readEntries(dir, fd, pos, visit)
		return next, stopped, err
	}
	if q.stillEmpty(dir, id) {
		return 0, false, nil
	}
	gen := q.beforeList(dir, fd, id)
	n, next, stopped, err := m.readEntries(dir, fd, 0, visit)
	if err == nil {
		q.afterList(dir, id, gen, n)
	}
	return next, stopped, err
}

// readEntries reads the directory dir, held open as fd, from the position
// pos, a few hundred entries at a time, calling visit for each until it
// returns false; n is how many it saw, next the position of the entry
// visit refused (0: none, the end was reached). It reads getdents(2)
// itself, not os.File.ReadDir, for the position of each entry: ScanInbox
// resumes where the last writer stopped (inboxcursor.go).
func (m *Mirror) readEntries(dir Dir, fd int, pos int64, visit func(Entry) bool) (n int, next int64, stopped bool, err error) {
	path := m.Path(dir, "")
	fail := func(op string, err error) (int, int64, bool, error) {
		return n, 0, false, fmt.Errorf("list: %w", &fs.PathError{Op: op, Path: path, Err: err})
	}
	// A fresh descriptor for reading, so the kept one's offset never moves.
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open", err)
	}
	defer unix.Close(rfd)
	if pos != 0 {
		if _, err := unix.Seek(rfd, pos, io.SeekStart); err != nil {
			return fail("seek", err)
		}
	}
	buf := make([]byte, 32<<10)
	next = pos
	for {
		nb, err := unix.Getdents(rfd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fail("getdents", err)
		}
		if nb == 0 {
			return n, 0, false, nil
		}
		for rec := buf[:nb]; len(rec) > 0; {
			d, size, ok := parseDirent(rec)
			if !ok {
				return fail("getdents", unix.EIO)
			}
			rec = rec[size:]
			if d.ino == 0 || d.name == "." || d.name == ".." {
				next = d.off
				continue
			}
			kind, ok := kindOfDT(d.typ)
			if !ok {
				var st unix.Stat_t
				if err := unix.Fstatat(rfd, d.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					if errors.Is(err, unix.ENOENT) {
						next = d.off
						continue // gone since the listing
					}
					return fail("lstat", err)
				}
				kind = kindOf(st.Mode)
			}
			n++
			if !visit(Entry{Name: d.name, Kind: kind}) {
				return n, next, true, nil
			}
			next = d.off
		}
	}
}

// dirent is one record getdents(2) returned.
type dirent struct {
	ino  uint64
	off  int64 // the position of the next record
	typ  uint8
	name string
}

// parseDirent reads the linux_dirent64 at the start of b, and its size.
func parseDirent(b []byte) (d dirent, size int, ok bool) {
	const head = 19 // d_ino 8, d_off 8, d_reclen 2, d_type 1
	if len(b) < head {
		return d, 0, false
	}
	size = int(binary.NativeEndian.Uint16(b[16:18]))
	if size < head || size > len(b) {
		return d, 0, false
	}
	name := b[head:size]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return dirent{ino: binary.NativeEndian.Uint64(b[0:8]), off: int64(binary.NativeEndian.Uint64(b[8:16])), typ: b[18], name: string(name)}, size, true
}

// kindOfDT maps a d_type to a Kind; ok is false for DT_UNKNOWN (a file
// system that does not say: the caller looks).
func kindOfDT(t uint8) (Kind, bool) {
	switch t {
	case unix.DT_REG:
		return Regular, true
	case unix.DT_LNK:
		return Symlink, true
	case unix.DT_DIR:
		return Directory, true
	case unix.DT_FIFO:
		return FIFO, true
	case unix.DT_UNKNOWN:
		return "", false
	}
	return Other, true
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
// It reads no further than the first most valid entries, or examineMost
// times as many entries in all (0: no bound), and more says it stopped
// there: a writer adopts a bounded number of files per turn of the tree's
// lock, so that a drop of a million files neither keeps every other
// writer out for minutes nor takes memory and descriptors in proportion
// (found from outside). A scan that stopped leaves a cursor, and the next
// one goes on from there (inboxcursor.go): entries that cannot be adopted
// (a task of that id exists, a hard link, a name that is no id) stay in
// inbox/, and the next writers must get past them to the rest.
//
// Names starting with "." are skipped silently: by convention they are
// writes in progress (write ".name", then rename to "name"), and a task id
// never starts with ".".
func (m *Mirror) ScanInbox(most int) (valid []string, rejected []Rejected, more bool, err error) {
	// seen: an entry met again once a scan from the cursor has wrapped
	// round to the start is not counted twice.
	seen := map[string]bool{}
	reset := func() { valid, rejected, seen = nil, nil, map[string]bool{} }
	visit := func(e Entry) bool {
		if strings.HasPrefix(e.Name, ".") || seen[e.Name] {
			return true
		}
		if most > 0 && (len(valid) == most || len(valid)+len(rejected) == examineMost*most) {
			return false // an entry past the bound: there is more
		}
		seen[e.Name] = true
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
	}
	sorted := func() {
		slices.Sort(valid)
		slices.SortFunc(rejected, func(a, b Rejected) int { return strings.Compare(a.Name, b.Name) })
	}
	if most == 0 {
		// Everything: no cursor to go on from or leave.
		if _, _, err := m.scanFrom(Inbox, 0, visit); err != nil {
			return nil, nil, false, fmt.Errorf("scan inbox: %w", err)
		}
		sorted()
		return valid, rejected, false, nil
	}
	from := m.inboxFrom()
	next, more, err := m.scanFrom(Inbox, from, visit)
	if err != nil && from != 0 {
		from = 0 // a position this directory no longer has: from the start
		reset()
		next, more, err = m.scanFrom(Inbox, 0, visit)
	}
	if err == nil && more && from == 0 {
		// Full from the start: go on from where the last writer stopped,
		// if another process did (the common empty inbox reads no file).
		if c := m.loadInboxCursor(); c != 0 {
			reset()
			from = c
			if next, more, err = m.scanFrom(Inbox, c, visit); err != nil {
				from = 0
				reset()
				next, more, err = m.scanFrom(Inbox, 0, visit)
			}
		}
	}
	if err == nil && !more && from != 0 {
		// The end, from a cursor: round to the start with what is left
		// of the turn (found from outside: a cursor past every entry, a
		// stale one after inbox/ was refilled, made a claim find nothing
		// with hundreds of files in inbox/).
		next, more, err = m.scanFrom(Inbox, 0, visit)
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("scan inbox: %w", err)
	}
	m.saveInboxCursor(next)
	sorted()
	return valid, rejected, more, nil
}

// examineMost bounds the entries a bounded ScanInbox reads, rejected ones
// included, as a multiple of its bound on valid ones: a million entries
// that are no task files cost each writer a bounded listing, and as many
// notices.
const examineMost = 4
