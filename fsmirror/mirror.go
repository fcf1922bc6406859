package fsmirror

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Dir is one of the tree's directories, relative to root.
type Dir string

// The directories of a tree.
const (
	Inbox     Dir = "inbox"      // drop box for hand-made tasks
	Waiting   Dir = "waiting"    // not claimable yet: dependencies, a schedule, a backoff
	Available Dir = "available"  // ready to claim
	Claimed   Dir = "claimed"    // held under a lease
	Done      Dir = "done"       // completed
	Failed    Dir = "failed"     // gave up after max attempts
	Out       Dir = "out"        // out/<task>/<name>: task outputs
	Meta      Dir = ".fence"     // journal, lock, staging
	Staging   Dir = ".fence/tmp" // new files are written here, then renamed in
	// Quarantine keeps extra copies that replay took out of the state
	// directories: never deleted, out of the way.
	Quarantine Dir = ".fence/quarantine"
)

// StateDirs lists the five state directories in lifecycle order: Waiting,
// Available, Claimed, Done, Failed.
var StateDirs = []Dir{Waiting, Available, Claimed, Done, Failed}

// layout is every directory of a tree, each after its parent ("" is root).
var layout = []struct {
	dir    Dir
	parent Dir
	name   string
	mode   uint32
	// upgrade marks a directory that trees made before it lack: Open
	// makes it when it is missing (after every older directory was
	// found, so a mistyped root is still refused).
	upgrade bool
}{
	{Inbox, "", "inbox", 0o755, false},
	{Available, "", "available", 0o755, false},
	{Claimed, "", "claimed", 0o755, false},
	{Done, "", "done", 0o755, false},
	{Failed, "", "failed", 0o755, false},
	{Waiting, "", "waiting", 0o755, true},
	{Out, "", "out", 0o755, false},
	{Meta, "", ".fence", 0o700, false},
	{Staging, Meta, "tmp", 0o700, false},
	{Quarantine, Meta, "quarantine", 0o700, false},
}

// Mirror is an open task tree. It holds a descriptor for the root and for
// each directory of the layout, so that every operation is relative to
// directories resolved once, without following symlinks. Its methods may be
// called from several goroutines, but not concurrently with Close.
type Mirror struct {
	// Crash, when non-nil, is called at named crash points (CrashAfterRename);
	// tests set it to exit the process there. It is nil in normal use.
	Crash func(point string)
	// Fault, when non-nil, is asked before every rename of a file out of
	// a directory; a non-zero errno fails that rename as the kernel would
	// (EPERM, EXDEV). EINVAL, ENOSYS or EOPNOTSUPP is renameat2's answer
	// on a file system without RENAME_NOREPLACE: the move, and every later
	// one, goes by link and unlink instead. Test builds set it from the
	// environment; it is nil in normal use.
	Fault func(from Dir, name string) unix.Errno
	// Trace, when non-nil, is told of every rename ("rename", old path,
	// new path) and every directory fsync ("sync", directory path, ""):
	// the power-loss test undoes the renames no fsync made durable. It is
	// also told of the content syncs of adopted files ("datasync", file
	// path, "", or one "syncfs", staging path, "" for many). It is nil in
	// normal use.
	Trace func(op, a, b string)

	// linkMoves is set once renameat2 has said the file system lacks
	// RENAME_NOREPLACE (NFS): every later move goes by link and unlink
	// (see linkMove) without asking again. A Fault of EINVAL, ENOSYS or
	// EOPNOTSUPP sets it too, which is how tests choose that path.
	linkMoves atomic.Bool

	root string
	// tab holds the open descriptors; nil once closed. Refresh replaces
	// it whole, so readers never see a table being changed.
	tab atomic.Pointer[table]

	retiredMu sync.Mutex
	retired   []int // descriptors Refresh replaced, closed by Close

	heldMu sync.Mutex
	held   map[string]heldFile // staged files this process writes (see Stage)

	quietMu sync.Mutex
	quiet   *quiet // see WatchQuiet; nil: every listing reads

	// Where the next bounded inbox scan starts (inboxcursor.go): this
	// process's position, whether .fence/inbox-cursor was read, and what
	// the file holds as far as this process knows.
	inboxPos, inboxSaved atomic.Int64
	inboxLoaded          atomic.Bool
	inboxTrouble         atomic.Pointer[string] // see InboxCursorTrouble
}

// table is a set of open directory descriptors and the identity of the
// directory each one was opened on.
type table struct {
	rootfd int
	fds    map[Dir]int
	ids    map[Dir]fileID
	// The mount of root and of each directory (mounts.go).
	rootMount mountKey
	mounts    map[Dir]mountKey
}

// fileID identifies a directory: a held descriptor keeps naming the
// directory it was opened on after a rename, so the identity is what tells
// a replaced directory.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// Create makes the tree at root, creating root itself if needed, and opens
// it. Directories that already exist are kept, so Create is idempotent; a
// symlink or a non-directory where a directory belongs is refused with a
// NotDirectoryError. New entries are made durable by fsyncing their parent.
func Create(root string) (*Mirror, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create tree: %w", err)
	}
	m, err := open(root, true)
	if err != nil {
		return nil, fmt.Errorf("create tree %s: %w", root, err)
	}
	return m, nil
}

// Open opens the existing tree at root. Every directory of the layout must
// exist as a real directory; Open never creates anything, so a mistyped root
// is reported instead of becoming an empty tree.
func Open(root string) (*Mirror, error) {
	m, err := open(root, false)
	if err == nil {
		return m, nil
	}
	var nd *NotDirectoryError
	var pe *fs.PathError
	switch {
	case errors.As(err, &nd) && nd.Kind == Symlink:
		// Never "move it aside and init": the directory it points to
		// may be this tree's own (.fence with the journal), and init
		// would then send the user to recover, which starts a journal
		// without its history.
		target, _ := os.Readlink(nd.Path)
		return nil, fmt.Errorf("open tree %s: %w (if %s is this tree's own directory, moved, put it back in place of the link; otherwise remove the link and make a directory there)", root, err, target)
	case errors.As(err, &nd):
		return nil, fmt.Errorf("open tree %s: %w (move it aside and make a directory there: mkdir %s)", root, err, nd.Path)
	case errors.Is(err, fs.ErrNotExist) && errors.As(err, &pe) && filepath.Clean(pe.Path) != filepath.Clean(root) && pe.Op == "open" && dirExists(filepath.Join(root, string(Meta))):
		return nil, fmt.Errorf("open tree %s: %w (a directory of the tree is missing: mkdir %s restores it)", root, err, pe.Path)
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("open tree %s: %w (not a fencectl tree? run `fencectl init` to create it)", root, err)
	}
	return nil, fmt.Errorf("open tree %s: %w", root, err)
}

// dirExists reports whether path is a directory.
func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// open opens root and the layout below it, creating missing directories
// when create is set.
func open(root string, create bool) (_ *Mirror, err error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	// root itself may be reached through a symlink (the user named it);
	// nothing below it is.
	rootfd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: abs, Err: err}
	}
	m := &Mirror{root: abs}
	tab := &table{rootfd: rootfd, fds: make(map[Dir]int, len(layout)), ids: make(map[Dir]fileID, len(layout)), mounts: make(map[Dir]mountKey, len(layout))}
	m.tab.Store(tab)
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if _, tab.rootMount, err = statDir(rootfd, abs); err != nil {
		return nil, err
	}
	dirty := map[int]string{} // parent fds that gained an entry
	for _, l := range layout {
		parent, ppath := tab.rootfd, abs
		if l.parent != "" {
			parent, ppath = tab.fds[l.parent], m.Path(l.parent, "")
		}
		if create || l.upgrade {
			switch err := unix.Mkdirat(parent, l.name, l.mode); err {
			case nil:
				dirty[parent] = ppath
				ownLikeParent(parent, l.name)
			case unix.EEXIST:
			default:
				if l.upgrade && !create && (err == unix.EACCES || err == unix.EPERM || err == unix.EROFS) {
					// Only a refusal means the directory is missing and
					// this user may not make it; EIO is the disk's.
					err = fmt.Errorf("%w (this tree was made by an older fencectl: run any write command, e.g. `fencectl reap`, once as a user who may write the tree root)", err)
				}
				return nil, &fs.PathError{Op: "mkdir", Path: m.Path(l.dir, ""), Err: err}
			}
		}
		fd, err := openDir(parent, l.name, m.Path(l.dir, ""))
		if err != nil {
			return nil, err
		}
		tab.fds[l.dir] = fd
		if tab.ids[l.dir], tab.mounts[l.dir], err = statDir(fd, m.Path(l.dir, "")); err != nil {
			return nil, err
		}
	}
	for fd, path := range dirty {
		if err := unix.Fsync(fd); err != nil {
			return nil, &fs.PathError{Op: "fsync", Path: path, Err: err}
		}
	}
	return m, nil
}

// openDir opens the directory name below parent without following a
// symlink, for *at calls and fsync (so O_RDONLY, not O_PATH).
func openDir(parent int, name, path string) (int, error) {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		return fd, nil
	}
	if err == unix.ELOOP || err == unix.ENOTDIR {
		var st unix.Stat_t
		if unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return -1, &NotDirectoryError{Path: path, Kind: kindOf(st.Mode)}
		}
	}
	return -1, &fs.PathError{Op: "open", Path: path, Err: err}
}

// Close releases the tree's descriptors. Calling it again does nothing.
func (m *Mirror) Close() error {
	tab := m.tab.Swap(nil)
	if tab == nil {
		return nil
	}
	if q := m.quietFor(Inbox); q != nil {
		q.close()
	}
	m.heldMu.Lock()
	for name, h := range m.held {
		h.f.Close()
		delete(m.held, name)
	}
	m.heldMu.Unlock()
	var errs []error
	for _, fd := range tab.fds {
		errs = append(errs, unix.Close(fd))
	}
	errs = append(errs, unix.Close(tab.rootfd))
	m.retiredMu.Lock()
	for _, fd := range m.retired {
		unix.Close(fd)
	}
	m.retired = nil
	m.retiredMu.Unlock()
	return errors.Join(errs...)
}

// Refresh notices directories of the tree that were replaced since they
// were opened and opens the new ones. A long-lived process (run --loop,
// the library) holds its descriptors for days; after an operator archives
// a directory (`mv done done.old && mkdir done`) the held descriptor still
// names done.old, and completions would land there. Each directory's
// identity (device, inode) is compared with an lstat of its path (never
// following a symlink); root is compared with a stat of its path, which
// the user may have named through a symlink. A directory that is missing
// or is not a directory is an error, as it is for Open. Callers run
// Refresh under the journal lock, before they act: about one fstatat per
// directory. The replaced descriptors stay open until Close, since another
// goroutine may be using one at this moment.
func (m *Mirror) Refresh() (replaced []Dir, err error) {
	old := m.tab.Load()
	if old == nil {
		return nil, fmt.Errorf("tree %s: %w", m.root, fs.ErrClosed)
	}
	var tab *table // a copy, made at the first change
	cur := old
	// The root by its path (which may be a symlink the user named), and
	// the root this table holds open.
	atPath, pathMount, _, err := statAt(unix.AT_FDCWD, m.root, 0, m.root)
	if err != nil {
		return nil, err
	}
	held, _, err := statDir(old.rootfd, m.root)
	if err != nil {
		return nil, err
	}
	changed := map[Dir]bool{}
	var opened []int
	defer func() {
		if err != nil {
			for _, fd := range opened {
				unix.Close(fd)
			}
		}
	}()
	clone := func() {
		if tab == nil {
			tab = &table{rootfd: old.rootfd, fds: maps.Clone(old.fds), ids: maps.Clone(old.ids), rootMount: old.rootMount, mounts: maps.Clone(old.mounts)}
			cur = tab
		}
	}
	if atPath != held || !sameMount(pathMount, old.rootMount) {
		fd, err := unix.Open(m.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: m.root, Err: err}
		}
		opened = append(opened, fd)
		clone()
		tab.rootfd = fd
		tab.rootMount = pathMount
		changed[""] = true
	}
	for _, l := range layout {
		parent := cur.rootfd
		if l.parent != "" {
			parent = cur.fds[l.parent]
		}
		path := m.Path(l.dir, "")
		id, mount, mode, err := statAt(parent, l.name, unix.AT_SYMLINK_NOFOLLOW, path)
		if err != nil {
			return nil, err
		}
		if k := kindOf(mode); k != Directory {
			return nil, &NotDirectoryError{Path: path, Kind: k}
		}
		// A mount on the directory (even a bind mount of it onto itself,
		// the same inode) is a new directory too (mounts.go).
		if !changed[l.parent] && id == cur.ids[l.dir] && sameMount(mount, cur.mounts[l.dir]) {
			continue
		}
		fd, err := openDir(parent, l.name, path)
		if err != nil {
			return nil, err
		}
		opened = append(opened, fd)
		id, mount, err = statDir(fd, path)
		if err != nil {
			return nil, err
		}
		clone()
		tab.fds[l.dir], tab.ids[l.dir], tab.mounts[l.dir] = fd, id, mount
		changed[l.dir] = true
		replaced = append(replaced, l.dir)
	}
	if tab == nil {
		return nil, nil
	}
	if !m.tab.CompareAndSwap(old, tab) {
		return nil, fmt.Errorf("tree %s: refreshed or closed meanwhile", m.root)
	}
	m.retiredMu.Lock()
	if changed[""] {
		m.retired = append(m.retired, old.rootfd)
	}
	for d := range changed {
		if d != "" {
			m.retired = append(m.retired, old.fds[d])
		}
	}
	m.retiredMu.Unlock()
	return replaced, nil
}

// Root returns the absolute path of the tree.
func (m *Mirror) Root() string { return m.root }

// Path returns the absolute path of name in dir, for messages and for the
// caller to hand to users (FENCE_TASK_FILE). Callers validate name first;
// fsmirror itself never opens a file by this path. An empty name gives the
// directory.
func (m *Mirror) Path(dir Dir, name string) string {
	return filepath.Join(m.root, string(dir), name)
}

// dirfd returns the open descriptor of dir.
func (m *Mirror) dirfd(dir Dir) (int, error) {
	tab := m.tab.Load()
	if tab == nil {
		return -1, fmt.Errorf("tree %s: %w", m.root, fs.ErrClosed)
	}
	fd, ok := tab.fds[dir]
	if !ok {
		return -1, fmt.Errorf("unknown tree directory %q", dir)
	}
	return fd, nil
}

// dirID returns the identity of the directory dir this mirror holds.
func (m *Mirror) dirID(dir Dir) (fileID, bool) {
	tab := m.tab.Load()
	if tab == nil {
		return fileID{}, false
	}
	id, ok := tab.ids[dir]
	return id, ok
}

// CheckPerms returns a warning if the root or a directory of the tree is
// writable by every user (anyone could then add, move or delete tasks behind
// the journal's back), or "" if not. It is advice; nothing is refused.
func (m *Mirror) CheckPerms() string {
	tab := m.tab.Load()
	if tab == nil {
		return ""
	}
	var loose []string
	check := func(fd int, path string) {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&0o002 != 0 {
			loose = append(loose, path)
		}
	}
	check(tab.rootfd, m.root)
	for _, l := range layout {
		check(tab.fds[l.dir], m.Path(l.dir, ""))
	}
	if len(loose) == 0 {
		return ""
	}
	return fmt.Sprintf("world-writable: %s (any local user can add, move or delete tasks; run chmod o-w)",
		strings.Join(loose, ", "))
}

// ownLikeParent gives a directory root just made to the owner of the
// directory it is in: root's read of another user's tree (status) that
// made an upgrade's missing directory (waiting/) as root's locked that
// user out of every step that moves a task there (found from outside).
func ownLikeParent(parent int, name string) {
	if os.Geteuid() != 0 {
		return
	}
	var pst unix.Stat_t
	if unix.Fstat(parent, &pst) != nil || pst.Uid == 0 {
		return
	}
	_ = unix.Fchownat(parent, name, int(pst.Uid), int(pst.Gid), unix.AT_SYMLINK_NOFOLLOW)
}
