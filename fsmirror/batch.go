package fsmirror

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Batch is a set of moves whose directory fsyncs are done once for all:
// when many tasks move after one journal commit (group commit), each
// directory is fsynced once instead of twice per file. Moves made through
// a Batch are durable only after Sync.
type Batch struct {
	m     *Mirror
	dests []Dir
	srcs  []Dir
	seen  map[Dir]bool
	lazy  bool // a MoveLazy was made: Sync passes its crash point
	// unsynced are files Adopt staged whose content Sync makes durable
	// first: nobody may have synced it (see syncContents).
	unsynced []string
}

// NewBatch starts a batch of moves.
func (m *Mirror) NewBatch() *Batch {
	return &Batch{m: m, seen: map[Dir]bool{}}
}

// Move renames task id from one directory to another, like Mirror.Move,
// but leaves the fsyncs to Sync.
func (b *Batch) Move(id string, from, to Dir) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if err := b.m.rename(from, id, to, id); err != nil {
		return fmt.Errorf("move %s from %s to %s: %w", id, from, to, err)
	}
	b.note(from, to)
	return nil
}

// MoveLazy renames task id from one directory to another and leaves the
// move out of Sync: no directory is fsynced for it, ever. Only for a file
// whose content is already durable, moved after a journal commit that
// says where it goes: a power loss may undo the rename, and the first
// writer after the reboot redoes it from the journal (fence's boot
// reconcile). It saves the two directory fsyncs of a claim or complete.
func (b *Batch) MoveLazy(id string, from, to Dir) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if err := b.m.rename(from, id, to, id); err != nil {
		return fmt.Errorf("move %s from %s to %s: %w", id, from, to, err)
	}
	b.lazy = true
	return nil
}

// MoveFrom renames the file src in from to id in to, like
// Mirror.MoveFrom, but leaves the fsyncs to Sync.
func (b *Batch) MoveFrom(from Dir, src string, to Dir, id string) error {
	if err := validComponent(src, "file name"); err != nil {
		return err
	}
	if err := ValidateID(id); err != nil {
		return err
	}
	err := b.m.rename(from, src, to, id)
	if from == Staging && errors.Is(err, fs.ErrNotExist) {
		// Kept after an earlier try failed (Mirror.KeepUnpublished).
		if again := b.m.rename(from, UnpublishedPrefix+src, to, id); !errors.Is(again, fs.ErrNotExist) {
			err = again
		}
	}
	if err != nil {
		return fmt.Errorf("move %s to %s as %s: %w", b.m.Path(from, src), to, id, err)
	}
	if from == Staging {
		b.m.release(src)
	}
	b.note(from, to)
	return nil
}

// AdoptPrefix starts the name under which Adopt stages a file in
// .fence/tmp: AdoptPrefix + the task id.
const AdoptPrefix = "adopt-"

// Adopt renames the regular file id in from (the inbox) to .fence/tmp as
// AdoptPrefix+id and returns that name, for MoveFrom once the adoption
// has committed. It is the check that the file can leave from at all
// (EPERM in a sticky drop box owned by another user, EXDEV when from is
// a mount point): a file that cannot is never adopted. It fails with
// *ExistsError if a file of that name is already staged.
func (b *Batch) Adopt(from Dir, id string) (string, error) {
	if err := ValidateID(id); err != nil {
		return "", err
	}
	name := AdoptPrefix + id
	// A live adopter holds a shared flock on the file, taken before it
	// leaves from, until MoveFrom places it: a sweeper on another host
	// (replay on an etcd tree) tells it from a file a dead adopter left
	// (Sweep). A file this process cannot open is adopted unlocked.
	var held *os.File
	leased := false
	if fromfd, err := b.m.dirfd(from); err == nil {
		if fd, err := unix.Openat(fromfd, id, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			if leased, err = noWriters(fd); err != nil {
				unix.Close(fd)
				return "", &BeingWrittenError{Name: id}
			}
			if unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) == nil {
				held = os.NewFile(uintptr(fd), name)
			} else {
				endLease(fd, leased)
				unix.Close(fd)
				leased = false
			}
		}
	}
	if err := b.m.rename(from, id, Staging, name); err != nil {
		if held != nil {
			endLease(int(held.Fd()), leased)
			held.Close()
		}
		return "", fmt.Errorf("move %s to %s: %w", b.m.Path(from, id), Staging, err)
	}
	if held != nil && leased {
		// A writer that opened the file while the lease was held waited
		// for it to end, and has the file open now: look again.
		endLease(int(held.Fd()), true)
		if _, err := noWriters(int(held.Fd())); err != nil {
			held.Close()
			if err := b.m.rename(Staging, name, from, id); err != nil {
				return "", fmt.Errorf("put %s back: %w", b.m.Path(from, id), err)
			}
			return "", &BeingWrittenError{Name: id}
		}
		endLease(int(held.Fd()), true)
	}
	// Checked once the file is staged, where nobody else links to it: a
	// link made after a check in from could not be seen.
	if links, err := b.m.links(Staging, name); err == nil && links > 1 {
		if held != nil {
			held.Close()
		}
		if err := b.m.rename(Staging, name, from, id); err != nil {
			return "", fmt.Errorf("put %s back: %w", b.m.Path(from, id), err)
		}
		return "", &HardLinkedError{Name: id, Links: links}
	}
	// Another user's file (a group-writable inbox) could not be checked
	// for writers (a lease is the owner's to take), and its owner could
	// still rewrite the task under its holder: it is not adopted.
	if owner, err := b.m.owner(Staging, name); err == nil && owner != os.Geteuid() {
		if held != nil {
			held.Close()
		}
		if err := b.m.rename(Staging, name, from, id); err != nil {
			return "", fmt.Errorf("put %s back: %w", b.m.Path(from, id), err)
		}
		return "", &OtherOwnerError{Name: id, Owner: owner}
	}
	if held != nil {
		stagingfd, _ := b.m.dirfd(Staging)
		b.m.hold(name, held, stagingfd)
	}
	b.unsynced = append(b.unsynced, name)
	b.note(from, Staging)
	return name, nil
}

// syncAllAbove is how many staged files Sync makes durable with one
// syncfs(2) of the file system rather than one fdatasync each: 2,000
// files dropped at once took 1.6 s one by one, against 0.3 s unsynced.
const syncAllAbove = 16

// syncContents makes the contents of the files Adopt staged durable. The
// content exists nowhere else, and whoever wrote it need not have synced
// it (`echo job > x && mv x inbox/`): a power loss after the commit that
// makes it a task would have left the task and lost its content.
func (b *Batch) syncContents() error {
	if err := b.m.SyncContents(Staging, b.unsynced); err != nil {
		return err
	}
	b.unsynced = nil
	return nil
}

// SyncContents makes the contents of the files names in dir durable,
// before a commit makes tasks of files someone else wrote (an adoption
// from inbox/, replay's of unknown files, recover's): one fdatasync each,
// or one syncfs(2) of the file system for more than syncAllAbove.
func (m *Mirror) SyncContents(dir Dir, names []string) error {
	if len(names) == 0 {
		return nil
	}
	dirfd, err := m.dirfd(dir)
	if err != nil {
		return err
	}
	if len(names) > syncAllAbove {
		if err := unix.Syncfs(dirfd); err != nil {
			return &fs.PathError{Op: "syncfs", Path: m.Path(dir, ""), Err: err}
		}
		if m.Trace != nil {
			m.Trace("syncfs", m.Path(dir, ""), "")
		}
		return nil
	}
	for _, name := range names {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: m.Path(dir, name), Err: err}
		}
		err = unix.Fdatasync(fd)
		unix.Close(fd)
		if err != nil {
			return &fs.PathError{Op: "fdatasync", Path: m.Path(dir, name), Err: err}
		}
		if m.Trace != nil {
			m.Trace("datasync", m.Path(dir, name), "")
		}
	}
	return nil
}

// Links returns how many names the file name in dir has: more than the
// tree holds means its content is shared with a file outside it.
func (m *Mirror) Links(dir Dir, name string) (uint64, error) { return m.links(dir, name) }

// links returns how many names the file name in dir has.
func (m *Mirror) links(dir Dir, name string) (uint64, error) {
	st, err := m.lstatAt(dir, name)
	return uint64(st.Nlink), err
}

// owner returns the uid that owns the file name in dir.
func (m *Mirror) owner(dir Dir, name string) (int, error) {
	st, err := m.lstatAt(dir, name)
	return int(st.Uid), err
}

// lstatAt stats the file name in dir, never through a symlink.
func (m *Mirror) lstatAt(dir Dir, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := m.dirfd(dir)
	if err != nil {
		return st, err
	}
	return st, unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
}

func (b *Batch) note(from, to Dir) {
	if !b.seen["to:"+to] {
		b.seen["to:"+to] = true
		b.dests = append(b.dests, to)
	}
	if !b.seen["from:"+from] {
		b.seen["from:"+from] = true
		b.srcs = append(b.srcs, from)
	}
}

// Sync makes every move of the batch durable: the destination directories
// first, then the sources that were not also destinations, so no file's
// old name is durably gone before its new one is durable.
func (b *Batch) Sync() error { return b.sync(true) }

// SyncStaged is Sync for the files Adopt staged, before the commit that
// adopts them: their contents and names durable first. It has no crash
// point: a crash before that commit is one before it (the staged files
// go back to inbox/).
func (b *Batch) SyncStaged() error { return b.sync(false) }

func (b *Batch) sync(crashPoint bool) error {
	if err := b.syncContents(); err != nil {
		return err
	}
	if len(b.dests) == 0 && !b.lazy {
		return nil
	}
	if b.m.Crash != nil && crashPoint {
		b.m.Crash(CrashAfterRename)
	}
	b.lazy = false
	synced := map[Dir]bool{}
	for _, d := range append(append([]Dir{}, b.dests...), b.srcs...) {
		if synced[d] {
			continue
		}
		synced[d] = true
		if err := b.m.syncDir(d); err != nil {
			return err
		}
	}
	b.dests, b.srcs, b.seen = nil, nil, map[Dir]bool{}
	return nil
}

// noWriters reports whether the file open (read-only) at fd is open for
// writing by any process: a read lease is refused (EAGAIN) exactly then.
// A file still being written (`cat big > inbox/x`) was adopted with half
// its content, and the rest was then written into the task under its
// holder. On success the lease is held (leased) until endLease; while it
// is, a process that opens the file for writing waits. Where leases are
// not allowed (another user's file without CAP_LEASE, leases disabled, a
// file system without them) nothing can be told: no error, no lease.
func noWriters(fd int) (leased bool, err error) {
	switch _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK); err {
	case nil:
		return true, nil
	case unix.EAGAIN:
		return false, err
	}
	return false, nil
}

// endLease gives up the read lease noWriters took, if it took one.
func endLease(fd int, leased bool) {
	if leased {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	}
}
