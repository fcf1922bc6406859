package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"
	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// SchemaVersion is the newest layout this code writes. Version 2 stores
// records in the binary form of codec.go; version 3 adds the token
// ceiling, which every claim must respect (an older fencectl would issue
// tokens past it), and the "missing" event (an older replay could not fold
// it and would undo it); version 4 adds V2 records (dependencies, labels,
// a not-before time) and their indexes (the dependents and per-label
// ready buckets). Versions 1 (JSON records, same buckets) to 3 are still
// read. A new journal is version 3 (baseVersion), and stays so while no
// task uses what version 4 adds, so the previous fencectl can still use
// it; the first write of a V2 record marks it version 4, the first write
// to a version 1 or 2 journal marks it version 3, so that an older
// fencectl refuses it with a VersionError instead of misreading it (or
// claiming a task it cannot see is blocked). Version 5 adds the waiting
// state (tasks in waiting/, the due index, backoff defaults): a version 4
// reader would find a state it has no directory for, so the first V2
// record written now marks the journal version 5 (a version 4 journal
// too: fence moves its blocked tasks to waiting/ in that write).
const SchemaVersion = "5"

// baseVersion is the version a new journal starts at, and what every
// write raises an older one to.
const baseVersion = "3"

// readVersions are the older layouts still read.
var readVersions = []string{"1", "2", "3", "4"}

// FileName and LockName are the journal's files inside the .fence directory.
const (
	FileName = "journal.db"
	LockName = "lock"
)

// minFileSize is the smallest valid bbolt file: two meta pages, a freelist
// page and a root leaf (4 pages of at least 4 KiB on the systems we run on).
const minFileSize = 4 * 4096

// DB is an open journal together with the flock that guards it.
type DB struct {
	b        *bbolt.DB
	file     *os.File // the file bbolt opened, and holds its own flock on
	path     string
	lock     *Lock
	readOnly bool
	parked   *parkedState // set while parked (see Park)
	version  string       // the journal's schema version, as opened
	// witnessAt is when the newest witness this handle knows the ceiling
	// files hold was written (see Tx.reserve); zero for a fresh handle,
	// which reads the files before its first token.
	witnessAt time.Time
	// ceilings is what the handle last read of the ceiling's files, for
	// Tx.LostTokens, the check of every write.
	ceilings  journal.CeilingCache
	clock     func() time.Time // answers Tx.Now: bbolt has no clock of its own
	onUpgrade func(from, to string)
}

// Path returns the journal file's path inside the meta directory dir.
func Path(dir string) string { return filepath.Join(dir, FileName) }

// Exists reports whether dir holds a journal file (of any content).
func Exists(dir string) (bool, error) {
	_, err := os.Lstat(Path(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Create writes a new, empty journal into dir with the given defaults. It
// builds the file under a temporary name and renames it into place, so a
// crash during init never leaves a half-made journal behind. The token
// counter is seeded from now in microseconds. Create fails with fs.ErrExist
// if a journal is already there.
func Create(dir string, d record.Defaults, now time.Time) error {
	return createSeeded(dir, d, uint64(now.UnixMicro()))
}

// createSeeded is Create with the token counter starting at seed: recover
// starts above every token the lost journal can have issued.
func createSeeded(dir string, d record.Defaults, seed uint64) error {
	final := Path(dir)
	if ok, err := Exists(dir); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("create journal %s: %w", final, fs.ErrExist)
	}
	// A name of its own: two creators (two inits at once) never share or
	// remove each other's file; RENAME_NOREPLACE below picks one winner.
	// (pid and clock, not crypto/rand: see writeCeilingFile.)
	tmp := fmt.Sprintf("%s%s%d-%d", final, creatingSuffix, os.Getpid(), time.Now().UnixNano())
	b, err := bbolt.Open(tmp, 0o600, &bbolt.Options{Timeout: time.Second, FreelistType: bbolt.FreelistMapType, OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
		return os.OpenFile(name, flag|os.O_EXCL, mode)
	}})
	if err != nil {
		_ = os.Remove(tmp) // a full disk, say: leave nothing half made
		return fmt.Errorf("create journal %s: %w", tmp, err)
	}
	err = b.Update(func(btx *bbolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := btx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := btx.Bucket(bucketMeta)
		for k, v := range map[string][]byte{
			keyVersion:  []byte(createVersion(d)),
			keyTreeID:   []byte(ulid.Make().String()),
			keyDefaults: journal.EncodeDefaults(d),
			keyToken:    u64(seed),
		} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsyncPath(tmp)
	}
	if err == nil {
		err = renameNoReplace(tmp, final)
	}
	if err == nil {
		err = fsyncPath(dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("create journal %s: %w", final, err)
	}
	return nil
}

// creatingSuffix marks a journal being built by Create.
const creatingSuffix = ".creating-"

// sweepCreating removes the half-built journals that a Create killed
// before its rename left in dir. Only call it holding the lock that every
// creator holds (init and recover do), so no live Create loses its file.
func sweepCreating(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, FileName+creatingSuffix+"*"))
	for _, n := range names {
		_ = os.Remove(n)
	}
	_ = os.Remove(filepath.Join(dir, FileName+".creating")) // the fixed name of older versions
}

func fsyncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Backend is the bbolt store as a journal.Backend: the journal of a tree
// is the file .fence/journal.db, guarded by the flock on .fence/lock.
type Backend struct {
	LockMode LockMode // how writers are kept apart; the zero value is LockFlock
}

// LockMode says which locks Open takes.
type LockMode int

const (
	// LockFlock takes the blocking flock on .fence/lock first, so that
	// bbolt's own lock, which polls every 50 ms, is free by the time it
	// is taken. The default.
	LockFlock LockMode = iota
	// LockBoltOnly takes bbolt's polling lock alone: for a caller that
	// holds .fence/lock already (the tree lock's Open), or to measure what
	// the flock buys (make bench, FENCE_LOCK_MODE=bbolt). Every process on a
	// tree must use the same mode. A handle opened so cannot be parked.
	LockBoltOnly
)

var _ journal.Backend = Backend{}

// Name names the store: "bbolt".
func (Backend) Name() string { return "bbolt" }

// Exists reports whether dir holds a journal file.
func (Backend) Exists(dir string) (bool, error) { return Exists(dir) }

// Path returns the journal file's path.
func (Backend) Path(dir string) string { return Path(dir) }

// Open is Open as a journal.Store, with b's lock mode.
func (b Backend) Open(dir string, o journal.OpenOptions) (journal.Store, error) {
	db, err := open(dir, o, b.LockMode)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return db, nil
}

// Watch is Watch as a journal.Watcher.
func (Backend) Watch(dir string) (journal.Watcher, error) {
	w, err := Watch(dir)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Open takes the lock on dir/lock and opens dir/journal.db. A missing
// journal is ErrNoJournal (Open never creates one); an unreadable one is a
// *CorruptError; a journal of another schema is a *VersionError.
func Open(dir string, o journal.OpenOptions) (*DB, error) { return open(dir, o, LockFlock) }

func open(dir string, o journal.OpenOptions, mode LockMode) (db *DB, err error) {
	if _, err := os.Lstat(Path(dir)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", journal.ErrNoJournal, Path(dir))
	}
	var lock *Lock
	start := time.Now()
	if mode != LockBoltOnly {
		lock, err = AcquireLock(filepath.Join(dir, LockName), !o.ReadOnly, o.Timeout)
		if err != nil && !(o.ReadOnly && readOnlyFS(err)) {
			return nil, err
		}
		err = nil
		// A reader on a read-only tree without a lock file cannot make
		// one: bbolt's shared lock (below) alone keeps writers out.
	}
	// Holding .fence/lock, bbolt's own lock is free in practice. It is not
	// when .fence/lock was removed (or replaced) while a writer held it:
	// the next process locks a new file and must then wait for bbolt's.
	// That wait is the rest of the caller's timeout, and running out is
	// busy (exit 5), as for .fence/lock.
	boltTimeout := max(o.Timeout-time.Since(start), time.Millisecond)
	defer func() {
		if err != nil {
			lock.Release()
		}
	}()
	path := Path(dir)
	b, file, err := openBolt(path, o.ReadOnly, boltTimeout)
	if busy, ok := errors.AsType[*BusyError](err); ok {
		busy.Waited = o.Timeout // the whole wait, .fence/lock's included
	}
	if err != nil {
		return nil, err
	}
	db = &DB{b: b, file: file, path: path, lock: lock, readOnly: o.ReadOnly, clock: o.Clock, onUpgrade: o.OnUpgrade}
	if db.clock == nil {
		db.clock = time.Now
	}
	if err := db.checkVersion(); err != nil {
		b.Close()
		return nil, err
	}
	return db, nil
}

// openBolt opens bbolt on the journal file at path, for a caller that
// holds .fence/lock (or needs none): bbolt's own flock, shared for a
// reader, is waited for up to timeout. It returns the file bbolt opened
// too: Close and Park lock and unlock it beside bbolt.
func openBolt(path string, readOnly bool, timeout time.Duration) (*bbolt.DB, *os.File, error) {
	if err := checkFile(path); err != nil {
		return nil, nil, err
	}
	b, file, err := openBoltFile(path, readOnly, timeout)
	switch {
	case err == nil:
		return b, file, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, nil, &BusyError{Lock: path, Waited: timeout, Holders: lockHolders(path)}
	case errors.Is(err, fs.ErrPermission):
		return nil, nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	if _, ok := errors.AsType[*journal.CorruptError](err); ok {
		return nil, nil, err
	}
	// A system call that failed (out of file descriptors or memory, an
	// I/O error, a signal) says nothing about the file: only what bbolt
	// found in it does. Called corrupt, it sent users to recover, which
	// sets a sound journal aside.
	if _, ok := errors.AsType[syscall.Errno](err); ok {
		return nil, nil, fmt.Errorf("open journal %s: %w (the journal itself was not read; nothing was changed)", path, err)
	}
	return nil, nil, &journal.CorruptError{Path: path, Detail: err.Error()}
}

// openBoltFile is bbolt.Open, with its panics on a damaged file turned
// into a *CorruptError.
func openBoltFile(path string, readOnly bool, timeout time.Duration) (b *bbolt.DB, file *os.File, err error) {
	// bbolt can panic inside Open on a damaged file, before it hands back a
	// handle to close. Keep the file it opened so the panic path can drop
	// bbolt's flock on it: closing alone is not enough, as the mapping bbolt
	// made keeps the open file (and so the flock) alive.
	defer func() {
		if err != nil && b == nil && file != nil {
			_ = unix.Flock(int(file.Fd()), unix.LOCK_UN)
			file.Close()
		}
	}()
	defer guard(path, &err)()
	b, err = bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:      timeout,
		ReadOnly:     readOnly,
		FreelistType: bbolt.FreelistMapType,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := openPlain(name, flag, uint32(mode.Perm()))
			file = f
			return f, err
		},
	})
	return b, file, err
}

// reopen closes bbolt on the file this handle has open (its flock and its
// mapping go with it) and opens the file now at the path, under the
// .fence/lock the handle holds, which it never gives up meanwhile: after
// compaction swapped the file, and when a parked handle resumes stale.
// timeout bounds the wait for bbolt's own flock, as in Open.
func (db *DB) reopen(timeout time.Duration) error {
	_ = db.b.Close()
	b, file, err := openBolt(db.path, db.readOnly, timeout)
	if err != nil {
		db.file = nil // closed with bbolt: Close must not unlock it again
		return err
	}
	db.b, db.file, db.witnessAt = b, file, time.Time{}
	return db.checkVersion()
}

// readOnlyFS reports whether err says a file could not be created because
// the file system or directory is read-only to us.
func readOnlyFS(err error) bool {
	return errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}

// checkFile refuses what bbolt would mishandle: a symlink (never followed),
// a non-regular file, and a file too short to be a journal (bbolt would
// silently initialise a zero-length file as a new, empty database).
func checkFile(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w at %s", journal.ErrNoJournal, path)
	}
	if err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return &journal.CorruptError{Path: path, Detail: "it is a symlink, which fencectl never follows"}
	case !fi.Mode().IsRegular():
		return &journal.CorruptError{Path: path, Detail: "not a regular file (" + fi.Mode().Type().String() + ")"}
	case fi.Size() == 0:
		return &journal.CorruptError{Path: path, Detail: "empty file (0 bytes)"}
	case fi.Size() < minFileSize:
		return &journal.CorruptError{Path: path, Detail: fmt.Sprintf("truncated: %d bytes, a journal has at least %d", fi.Size(), minFileSize)}
	}
	return nil
}

func (db *DB) checkVersion() error {
	return db.view(func(tx *Tx) error {
		meta := tx.tx.Bucket(bucketMeta)
		if meta == nil {
			return &journal.CorruptError{Path: db.path, Detail: "not a fencectl journal (no meta bucket)"}
		}
		v := string(meta.Get([]byte(keyVersion)))
		if v != SchemaVersion && v != foldedVersion && !slices.Contains(readVersions, v) {
			return &journal.VersionError{Path: db.path, Found: v, Supported: SchemaVersion}
		}
		db.version = v
		for _, name := range allBuckets {
			if tx.tx.Bucket(name) == nil {
				return &journal.CorruptError{Path: db.path, Detail: "bucket " + string(name) + " is missing"}
			}
		}
		return nil
	})
}

// Path returns the journal file's path.
func (db *DB) Path() string { return db.path }

// Verify reads the whole journal: bbolt's own consistency check, then
// every record, claim and event decoded. Any damage found is a
// *CorruptError. recover uses it to decide whether a journal can be kept.
func (db *DB) Verify() error {
	return db.view(func(tx *Tx) error {
		if errs := tx.Check(); len(errs) > 0 {
			return &journal.CorruptError{Path: db.path, Detail: fmt.Sprintf("consistency check: %v", errs[0])}
		}
		err := tx.ForEachTask(func(record.Task) error { return nil })
		if err == nil {
			err = tx.ForEachClaim(func(record.Claim) error { return nil })
		}
		if err == nil {
			err = tx.Events(1, func(record.Event) (bool, error) { return true, nil })
		}
		if err != nil {
			return &journal.CorruptError{Path: db.path, Detail: err.Error()}
		}
		return nil
	})
}

// Head identifies the last commit, by any process: the tree's id, bbolt's
// transaction id and the range of events that commit wrote. A journal that
// recover rebuilds has a new tree id, so two commits on one tree never share
// a head.
func (db *DB) Head() (head string, err error) {
	err = db.view(func(tx *Tx) error {
		meta := tx.tx.Bucket(bucketMeta)
		head = fmt.Sprintf("%s %d %x", meta.Get([]byte(keyTreeID)), tx.tx.ID(), meta.Get([]byte(keyLastCommit)))
		return nil
	})
	return head, err
}

// Close drops the locks, then closes bbolt. Unmapping the journal and
// closing it take tens of microseconds and need no lock: everything this
// handle wrote is committed, and it reads nothing more. So the next writer
// is let in first (bbolt's own flock too, or it would poll for it).
func (db *DB) Close() error {
	if db == nil {
		return nil
	}
	if db.file != nil && db.parked == nil {
		_ = unix.Flock(int(db.file.Fd()), unix.LOCK_UN)
	}
	err := db.lock.Release()
	if cerr := db.b.Close(); cerr != nil {
		err = cerr
	}
	return err
}

// Update runs fn in one write transaction. The events fn appends and the
// records it puts commit together or not at all. bbolt runs fn once: the
// flock (or bbolt's own lock) makes this the only writer.
func (db *DB) Update(fn func(journal.Tx) error) (err error) {
	defer guard(db.path, &err)()
	to := db.version
	var witness *journal.Witness
	err = db.update(func(btx *bbolt.Tx) error {
		tx := &Tx{tx: btx, clock: db.clock, dir: filepath.Dir(db.path), witnessAt: &db.witnessAt, ceilings: &db.ceilings}
		defer func() { witness = tx.witness }()
		if err := fn(tx); err != nil {
			return err
		}
		// This transaction may write what older versions cannot read:
		// from now on the journal is the version that reads it (see
		// SchemaVersion).
		to = upgradeTo(db.version, tx.v2)
		if tx.folded || db.version == foldedVersion {
			to = foldedVersion // compact.go
		}
		if to != db.version {
			if err := btx.Bucket(bucketMeta).Put([]byte(keyVersion), []byte(to)); err != nil {
				return err
			}
		}
		return tx.finish()
	})
	var unsynced *journal.UnsyncedError
	committed := err == nil || errors.As(err, &unsynced)
	if committed && witness != nil {
		// After the commit, still under the lock: the witness names a
		// token issued, never one a crash or a rollback took back.
		if journal.RaiseCeilingWitnessed(filepath.Dir(db.path), 0, *witness) == nil {
			db.witnessAt = witness.At
		}
	}
	if committed && to != db.version {
		from := db.version
		db.version = to
		if db.onUpgrade != nil && to == SchemaVersion {
			db.onUpgrade(from, to)
		}
	}
	return err
}

// update is bbolt's Update, except that a commit whose last sync failed
// after its meta page was written, which every later transaction reads,
// is reported as a *journal.UnsyncedError, not as a commit that did not
// happen (found from outside: a claim's fdatasync failed with EIO, the
// claim exited 1 and its task stayed held by a token nobody had). bbolt
// reloads its free list from that meta page when it rolls back, so the
// handle goes on consistent with what the file now says.
func (db *DB) update(fn func(*bbolt.Tx) error) error {
	btx, err := db.b.Begin(true)
	if err != nil {
		return err
	}
	defer func() { _ = btx.Rollback() }() // a panic in fn (guard) must not keep the writer's lock; a no-op once committed
	txid := btx.ID()
	if err := fn(btx); err != nil {
		return err
	}
	err = btx.Commit()
	if err == nil {
		err = commitSyncFault()
	}
	if err == nil {
		return nil
	}
	if rtx, rerr := db.b.Begin(false); rerr == nil {
		seen := rtx.ID()
		_ = rtx.Rollback()
		if seen >= txid {
			return &journal.UnsyncedError{Path: db.path, Err: err}
		}
	}
	return fmt.Errorf("write the journal %s: %w (nothing of this step is recorded)", db.path, err)
}

// createVersion is the version a new journal with defaults d starts at:
// the base version, unless its defaults need a version 5 reader (a
// backoff).
func createVersion(d record.Defaults) string {
	if journal.IsV2(journal.EncodeDefaults(d)) {
		return SchemaVersion
	}
	return baseVersion
}

// upgradeTo is the version a journal of version v is after a write that
// wrote V2 records (v2) or not.
func upgradeTo(v string, v2 bool) string {
	switch {
	case v2 || v == SchemaVersion:
		return SchemaVersion
	case v == "1" || v == "2":
		return baseVersion
	}
	return v
}

// View runs fn in a read-only transaction.
func (db *DB) View(fn func(journal.Tx) error) error {
	return db.view(func(tx *Tx) error { return fn(tx) })
}

func (db *DB) view(fn func(*Tx) error) (err error) {
	defer guard(db.path, &err)()
	return db.b.View(func(btx *bbolt.Tx) error {
		return fn(&Tx{tx: btx, clock: db.clock, dir: filepath.Dir(db.path), ceilings: &db.ceilings})
	})
}

// Exclusive is true for a writer: the flock on .fence/lock (or bbolt's own
// lock) keeps every other writer out until Park or Close.
func (db *DB) Exclusive() bool { return !db.readOnly && db.parked == nil }

// WritersHeld is true unless parked: a writer holds .fence/lock alone, a
// reader holds it shared (or, on a read-only tree without a lock file,
// bbolt's own shared lock), and either keeps every writer out.
func (db *DB) WritersHeld() bool { return db.parked == nil }

// guard turns a panic or a memory fault raised while reading a damaged file
// into a *CorruptError. Use as `defer guard(path, &err)()`: the call arms
// SetPanicOnFault before any page is touched, the deferred closure recovers.
func guard(path string, err *error) func() {
	old := debug.SetPanicOnFault(true)
	return func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			*err = &journal.CorruptError{Path: path, Detail: fmt.Sprint(r)}
		}
	}
}

// SalvageToken reads the highest token a journal file that may be damaged
// can have issued (its counter, its ceiling, its highest claim), without
// taking any lock (the caller holds .fence/lock). ok is false if none of
// them can be read; it never panics.
func SalvageToken(path string) (token uint64, ok bool) {
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return 0, false // never open a FIFO (it would block) or follow a symlink
	}
	var err error
	defer guard(path, &err)()
	b, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if err != nil {
		return 0, false
	}
	defer b.Close()
	// Each source on its own: a damaged page under one must not hide the
	// others. The counter, the ceiling (every issued token is at or below
	// it) and the highest token the claims bucket records.
	read := func(fn func(tx *bbolt.Tx) uint64) {
		var rerr error
		func() {
			defer guard(path, &rerr)()
			rerr = b.View(func(tx *bbolt.Tx) error {
				if v := fn(tx); v > token {
					token, ok = v, true
				}
				return nil
			})
		}()
	}
	read(func(tx *bbolt.Tx) uint64 {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			ok = true
			return max(getU64(meta.Get([]byte(keyToken))), getU64(meta.Get([]byte(keyCeiling))))
		}
		return 0
	})
	read(func(tx *bbolt.Tx) uint64 {
		if c := tx.Bucket(bucketClaims); c != nil {
			if k, _ := c.Cursor().Last(); len(k) == 8 {
				return getU64(k)
			}
		}
		return 0
	})
	return token, ok
}

// readDefaults reads the defaults of a journal file that may be damaged;
// ok is false if they cannot be read.
func readDefaults(path string) (d record.Defaults, ok bool) {
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return d, false
	}
	var err error
	defer guard(path, &err)()
	b, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	if err != nil {
		return d, false
	}
	defer b.Close()
	err = b.View(func(tx *bbolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			var err error
			d, err = journal.DecodeDefaults(meta.Get([]byte(keyDefaults)))
			ok = err == nil
		}
		return nil
	})
	return d, ok && err == nil && d.TTL > 0 && d.MaxAttempts > 0
}
