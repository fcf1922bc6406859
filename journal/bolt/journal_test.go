package bolt_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
	"github.com/fencectl/fencectl/journal/record"
)

func TestJournal_CreateThenOpen(t *testing.T) {
	dir := t.TempDir()
	if ok, err := boltstore.Exists(dir); err != nil || ok {
		t.Fatalf("Exists before Create = %v, %v; want false, nil", ok, err)
	}
	d := record.Defaults{TTL: 90 * time.Second, MaxAttempts: 7}
	if err := boltstore.Create(dir, d, t0); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if ok, err := boltstore.Exists(dir); err != nil || !ok {
		t.Fatalf("Exists after Create = %v, %v; want true, nil", ok, err)
	}
	fi, err := os.Stat(boltstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		t.Errorf("journal mode %v is world-accessible", perm)
	}
	if _, err := os.Lstat(boltstore.Path(dir) + ".creating"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left behind after Create: %v", err)
	}
	for _, ro := range []bool{false, true} {
		db, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: ro, Timeout: time.Second})
		if err != nil {
			t.Fatalf("Open(ReadOnly=%v): %v", ro, err)
		}
		if db.Path() != boltstore.Path(dir) {
			t.Errorf("Path() = %q, want %q", db.Path(), boltstore.Path(dir))
		}
		view(t, db, func(tx journal.Tx) error {
			got, err := tx.Defaults()
			if err != nil {
				return err
			}
			if got != d {
				t.Errorf("Defaults = %+v, want %+v", got, d)
			}
			if tx.(*boltstore.Tx).TreeID() == "" {
				t.Errorf("TreeID is empty")
			}
			if got, want := tx.LastToken(), uint64(t0.UnixMicro()); got != want {
				t.Errorf("LastToken of a new journal = %d, want the creation time in µs %d", got, want)
			}
			for s, n := range tx.Counts() {
				if n != 0 {
					t.Errorf("Counts[%s] = %d in a new journal", s, n)
				}
			}
			if id, ok := tx.(*boltstore.Tx).NextReady(); ok {
				t.Errorf("NextReady in a new journal = %q", id)
			}
			if evs, err := tx.LastCommit(); err != nil || len(evs) != 0 {
				t.Errorf("LastCommit of a new journal = %v, %v; want none", evs, err)
			}
			return nil
		})
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

func TestJournal_TreeIDsDiffer(t *testing.T) {
	ids := map[string]bool{}
	for i := 0; i < 2; i++ {
		db, _ := newJournal(t)
		view(t, db, func(tx journal.Tx) error {
			ids[tx.(*boltstore.Tx).TreeID()] = true
			return nil
		})
	}
	if len(ids) != 2 {
		t.Errorf("two journals share a tree id: %v", ids)
	}
}

func TestJournal_OpenMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if !errors.Is(err, journal.ErrNoJournal) {
		t.Fatalf("Open of a directory without a journal: err = %v, want ErrNoJournal", err)
	}
	if ok, _ := boltstore.Exists(dir); ok {
		t.Errorf("Open created a journal")
	}
	_, err = boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: time.Second})
	if !errors.Is(err, journal.ErrNoJournal) {
		t.Fatalf("read-only Open without a journal: err = %v, want ErrNoJournal", err)
	}
}

// The package documents "A missing journal is ErrNoJournal": that holds
// when the whole .fence directory is missing too.
func TestJournal_OpenMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope", ".fence")
	_, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if !errors.Is(err, journal.ErrNoJournal) {
		t.Errorf("Open in a missing directory: err = %v, want ErrNoJournal", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open created %s", dir)
	}
}

func TestJournal_CreateTwice(t *testing.T) {
	dir := t.TempDir()
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(boltstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	err = boltstore.Create(dir, defaults, t0.Add(time.Hour))
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second Create: err = %v, want fs.ErrExist", err)
	}
	after, err := os.ReadFile(boltstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("second Create changed the journal")
	}
}

func TestJournal_CreateOverSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere.db")
	if err := os.Symlink(target, boltstore.Path(dir)); err != nil {
		t.Fatal(err)
	}
	if err := boltstore.Create(dir, defaults, t0); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Create over a dangling symlink: err = %v, want fs.ErrExist", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Create followed the symlink and wrote %s", target)
	}
}

// populate fills a journal with n tasks and events in one transaction, so
// that the live data runs contiguously over many pages, and returns how
// many bytes of the file bbolt uses (its high-water mark).
func populate(t *testing.T, dir string, n int) int64 {
	t.Helper()
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	update(t, db, func(tx journal.Tx) error {
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("task-%04d", i)
			ev, err := tx.Append(record.Event{Time: t0, Type: record.EvAdd, Task: id, To: record.Available, Reason: "padding so that the data spans many pages"})
			if err != nil {
				return err
			}
			if err := tx.PutTask(nil, available(id, 0, ev.Seq)); err != nil {
				return err
			}
		}
		return nil
	})
	var used int64
	err = db.Bolt().View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return used
}

// damage is one way of ruining dir's journal.
type damage struct {
	name string
	do   func(t *testing.T, dir string)
}

func writeJournal(t *testing.T, dir string, b []byte) {
	t.Helper()
	if err := os.WriteFile(boltstore.Path(dir), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func garbage(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(n))).Read(b)
	return b
}

var damages = []damage{
	{"zero-length", func(t *testing.T, dir string) { writeJournal(t, dir, nil) }},
	{"100-bytes", func(t *testing.T, dir string) {
		b, err := os.ReadFile(boltstore.Path(dir))
		if err != nil {
			t.Fatal(err)
		}
		writeJournal(t, dir, b[:100])
	}},
	{"fresh-truncated-to-half", func(t *testing.T, dir string) {
		fi, err := os.Stat(boltstore.Path(dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(boltstore.Path(dir), fi.Size()/2); err != nil {
			t.Fatal(err)
		}
	}},
	{"populated-truncated-to-half", func(t *testing.T, dir string) {
		// Half of the pages bbolt uses, not of the file, which bbolt grows
		// ahead of its data.
		used := populate(t, dir, 300)
		if used/2 < 64<<10 {
			t.Fatalf("journal uses only %d bytes: too small to test a truncation past the size check", used)
		}
		if err := os.Truncate(boltstore.Path(dir), used/2); err != nil {
			t.Fatal(err)
		}
	}},
	{"garbage-64k", func(t *testing.T, dir string) { writeJournal(t, dir, garbage(64<<10)) }},
	{"zeros-64k", func(t *testing.T, dir string) { writeJournal(t, dir, make([]byte, 64<<10)) }},
	{"garbage-after-meta-pages", func(t *testing.T, dir string) {
		b, err := os.ReadFile(boltstore.Path(dir))
		if err != nil {
			t.Fatal(err)
		}
		copy(b[8192:], garbage(len(b)-8192))
		writeJournal(t, dir, b)
	}},
	{"symlink-to-valid-journal", func(t *testing.T, dir string) {
		other := t.TempDir()
		if err := boltstore.Create(other, defaults, t0); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(boltstore.Path(dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(boltstore.Path(other), boltstore.Path(dir)); err != nil {
			t.Fatal(err)
		}
	}},
	{"directory", func(t *testing.T, dir string) {
		if err := os.Remove(boltstore.Path(dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(boltstore.Path(dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}},
	{"bbolt-file-without-meta-bucket", func(t *testing.T, dir string) {
		if err := os.Remove(boltstore.Path(dir)); err != nil {
			t.Fatal(err)
		}
		b, err := bolt.Open(boltstore.Path(dir), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = b.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("something-else"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}},
	{"meta-without-other-buckets", func(t *testing.T, dir string) {
		b, err := bolt.Open(boltstore.Path(dir), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = b.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("events")) })
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}},
}

// readAll touches every record and event, as replay does.
func readAll(db *boltstore.DB) error {
	return db.View(func(tx journal.Tx) error {
		if err := tx.Events(1, func(record.Event) (bool, error) { return true, nil }); err != nil {
			return err
		}
		if err := tx.ForEachTask(func(record.Task) error { return nil }); err != nil {
			return err
		}
		for _, err := range tx.Check() {
			return err
		}
		return nil
	})
}

func TestJournal_OpenDamaged(t *testing.T) {
	for _, dm := range damages {
		for _, ro := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/readonly=%v", dm.name, ro), func(t *testing.T) {
				dir := t.TempDir()
				if err := boltstore.Create(dir, defaults, t0); err != nil {
					t.Fatal(err)
				}
				dm.do(t, dir)
				err := noPanic(t, "Open", func() error {
					db, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: ro, Timeout: time.Second})
					if err == nil {
						db.Close()
						return errors.New("Open succeeded")
					}
					return err
				})
				asCorrupt(t, err, boltstore.Path(dir))
				if errors.Is(err, journal.ErrNoJournal) {
					t.Errorf("a damaged journal reported as missing: %v", err)
				}
			})
		}
	}
}

// A library user that meets a damaged journal must get the same answer
// when it tries again in the same process: a failed Open must not leave
// bbolt's file lock (or the file) held behind.
func TestJournal_OpenDamagedTwiceInOneProcess(t *testing.T) {
	for _, dm := range damages {
		t.Run(dm.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := boltstore.Create(dir, defaults, t0); err != nil {
				t.Fatal(err)
			}
			dm.do(t, dir)
			for i, ro := range []bool{false, false, true, false} {
				err := noPanic(t, "Open", func() error {
					db, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: ro, Timeout: time.Second})
					if err == nil {
						db.Close()
						return errors.New("Open succeeded")
					}
					return err
				})
				var ce *journal.CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("Open #%d (readonly=%v): err = %v, want *journal.CorruptError", i+1, ro, err)
				}
			}
		})
	}
}

func TestJournal_OpenThenReadDamagedData(t *testing.T) {
	// The meta pages and bucket roots intact, the data pages overwritten:
	// Open may succeed, but reading must give a *CorruptError, not a panic.
	dir := t.TempDir()
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		t.Fatal(err)
	}
	used := int(populate(t, dir, 300))
	b, err := os.ReadFile(boltstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	half := used / 2
	copy(b[half:used], garbage(used-half))
	writeJournal(t, dir, b)
	err = noPanic(t, "Open and read", func() error {
		db, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: time.Second})
		if err != nil {
			return err
		}
		defer db.Close()
		if err := readAll(db); err != nil {
			return err
		}
		return errors.New("read every page of a damaged journal without an error")
	})
	asCorrupt(t, err, boltstore.Path(dir))
}

func TestJournal_VersionMismatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   []byte // nil deletes the key
		found string
	}{
		{"newer", []byte("99"), "99"},
		{"older", []byte("0"), "0"},
		{"missing", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := boltstore.Create(dir, defaults, t0); err != nil {
				t.Fatal(err)
			}
			b, err := bolt.Open(boltstore.Path(dir), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = b.Update(func(tx *bolt.Tx) error {
				meta := tx.Bucket([]byte("meta"))
				if meta == nil {
					return errors.New("no meta bucket: the test's idea of the layout is out of date")
				}
				if string(meta.Get([]byte("version"))) != boltstore.BaseVersion {
					return errors.New("meta/version is not the schema version: the test's idea of the layout is out of date")
				}
				if tc.set == nil {
					return meta.Delete([]byte("version"))
				}
				return meta.Put([]byte("version"), tc.set)
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			for _, ro := range []bool{false, true} {
				_, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: ro, Timeout: time.Second})
				var ve *journal.VersionError
				if !errors.As(err, &ve) {
					t.Fatalf("Open(readonly=%v): err = %v (%T), want *journal.VersionError", ro, err, err)
				}
				want := journal.VersionError{Path: boltstore.Path(dir), Found: tc.found, Supported: boltstore.SchemaVersion}
				if *ve != want {
					t.Errorf("VersionError = %+v, want %+v", *ve, want)
				}
			}
			// A refused Open holds nothing: the lock is free again.
			l, err := boltstore.AcquireLock(filepath.Join(dir, boltstore.LockName), true, 0)
			if err != nil {
				t.Fatalf("lock still held after a refused Open: %v", err)
			}
			l.Release()
		})
	}
}

func TestJournal_OpenReleasesLockOnClose(t *testing.T) {
	dir := newJournalClosed(t)
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(dir, boltstore.LockName)
	if _, err := boltstore.AcquireLock(lockPath, true, 0); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("lock free while the journal is open for writing: err = %v", err)
	}
	if _, err := boltstore.AcquireLock(lockPath, false, 0); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("shared lock granted while the journal is open for writing: err = %v", err)
	}
	// A second writer waits, then gives up with ErrBusy.
	if _, err := boltstore.Open(dir, journal.OpenOptions{Timeout: 50 * time.Millisecond}); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("second writer Open: err = %v, want ErrBusy", err)
	}
	if _, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: 50 * time.Millisecond}); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("reader Open while a writer holds the journal: err = %v, want ErrBusy", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The two waits above gave up; they may take the lock in passing when
	// it is freed, but must let go at once: a bounded wait gets it.
	l, err := boltstore.AcquireLock(lockPath, true, generous)
	if err != nil {
		t.Fatalf("lock still held after Close: %v", err)
	}
	l.Release()
}

func TestJournal_ReadersShare(t *testing.T) {
	dir := newJournalClosed(t)
	r1, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	defer r2.Close()
	if _, err := boltstore.Open(dir, journal.OpenOptions{Timeout: 50 * time.Millisecond}); !errors.Is(err, journal.ErrBusy) {
		t.Fatalf("writer Open while readers hold the journal: err = %v, want ErrBusy", err)
	}
}

// newJournalClosed creates a journal and leaves it closed.
func newJournalClosed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestJournal_UpdateRollsBackOnError(t *testing.T) {
	db, _ := newJournal(t)
	boom := errors.New("boom")
	err := db.Update(func(tx journal.Tx) error {
		if _, err := tx.Append(record.Event{Time: t0, Type: record.EvAdd, Task: "t1", To: record.Available}); err != nil {
			return err
		}
		if err := tx.PutTask(nil, available("t1", 0, 1)); err != nil {
			return err
		}
		if _, err := tx.NextToken(t0.Add(time.Hour)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update: err = %v, want the fn's error", err)
	}
	view(t, db, func(tx journal.Tx) error {
		if _, ok, _ := tx.Task("t1"); ok {
			t.Errorf("task of a rolled-back transaction is stored")
		}
		n := 0
		if err := tx.Events(1, func(record.Event) (bool, error) { n++; return true, nil }); err != nil {
			return err
		}
		if n != 0 {
			t.Errorf("%d events of a rolled-back transaction are stored", n)
		}
		if tx.(*boltstore.Tx).NextSeq() != 1 {
			t.Errorf("NextSeq after rollback = %d, want 1", tx.(*boltstore.Tx).NextSeq())
		}
		if tx.LastToken() != uint64(t0.UnixMicro()) {
			t.Errorf("token counter moved in a rolled-back transaction")
		}
		if c := tx.Counts()[record.Available]; c != 0 {
			t.Errorf("Counts[available] = %d after rollback", c)
		}
		return nil
	})
}

// A version 1 journal (JSON records) is read as it is, and its first write
// marks it version 2, so that an older fencectl refuses it cleanly instead
// of failing on the binary records that write adds.
func TestCodec_UpgradesVersion1Journal(t *testing.T) {
	dir := newJournalClosed(t)
	old := claimed(available("build-42", -7, 1<<40), 1795313309003512, t0.Add(90*time.Second))
	oldJSON, _ := json.Marshal(old)
	b, err := bolt.Open(boltstore.Path(dir), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("meta")).Put([]byte("version"), []byte("1")); err != nil {
			return err
		}
		return tx.Bucket([]byte("tasks")).Put([]byte(old.ID), oldJSON)
	})
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	version := func() string { t.Helper(); return storedVersion(t, dir) }

	ro, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatalf("Open of a version 1 journal: %v", err)
	}
	view(t, ro, func(tx journal.Tx) error {
		if got, ok, err := tx.Task(old.ID); err != nil || !ok || got.Lease == nil || got.Lease.Token != old.Lease.Token {
			t.Errorf("JSON record in a version 1 journal: %+v, %v, %v", got, ok, err)
		}
		return nil
	})
	ro.Close()
	if v := version(); v != "1" {
		t.Fatalf("reading changed the version to %q", v)
	}

	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addTask(t, db, "new")
	db.Close()
	if v := version(); v != boltstore.BaseVersion {
		t.Errorf("version after the first write = %q; want %q", v, boltstore.BaseVersion)
	}
	db, err = boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	view(t, db, func(tx journal.Tx) error {
		for _, id := range []string{old.ID, "new"} {
			if _, ok, err := tx.Task(id); err != nil || !ok {
				t.Errorf("task %s after the upgrade: ok=%v err=%v", id, ok, err)
			}
		}
		return nil
	})
}

// A new journal is version 3, readable by the fencectl before V2 records,
// and stays so while its records need no V2; the first V2 record (a task
// with dependencies) marks it version 4 in the same commit and says so.
func TestJournal_UpgradesOnFirstV2Record(t *testing.T) {
	dir := newJournalClosed(t)
	version := func() string { t.Helper(); return storedVersion(t, dir) }
	if v := version(); v != boltstore.BaseVersion {
		t.Fatalf("new journal: version %q, want %q", v, boltstore.BaseVersion)
	}
	var upgrades []string
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second, OnUpgrade: func(from, to string) { upgrades = append(upgrades, from+"->"+to) }})
	if err != nil {
		t.Fatal(err)
	}
	addTask(t, db, "plain")
	db.Close()
	if v := version(); v != boltstore.BaseVersion || len(upgrades) != 0 {
		t.Fatalf("after a V1 write: version %q, upgrades %v; want %q, none", v, upgrades, boltstore.BaseVersion)
	}
	db, err = boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second, OnUpgrade: func(from, to string) { upgrades = append(upgrades, from+"->"+to) }})
	if err != nil {
		t.Fatal(err)
	}
	rec := available("blocked", 0, 9)
	rec.After = []string{"plain"}
	if err := db.Update(func(tx journal.Tx) error { return tx.PutTask(nil, rec) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	want := boltstore.BaseVersion + "->" + boltstore.SchemaVersion
	if v := version(); v != boltstore.SchemaVersion || len(upgrades) != 1 || upgrades[0] != want {
		t.Fatalf("after a V2 write: version %q, upgrades %v; want %q, [%s]", v, upgrades, boltstore.SchemaVersion, want)
	}
}

// The first Fold marks the journal FoldedVersion in the same commit, so
// a fencectl that does not know folded records refuses it rather than
// rebuild the folded tasks from a log that no longer holds their events;
// a later V2 write keeps the mark, and this fencectl opens it.
func TestJournal_FoldMarksTheJournal(t *testing.T) {
	dir := newJournalClosed(t)
	version := func() string { t.Helper(); return storedVersion(t, dir) }
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addTask(t, db, "a")
	done := available("a", 0, 1)
	done.State = record.Done
	update(t, db, func(tx journal.Tx) error { return tx.Fold(done, 1) })
	db.Close()
	if v := version(); v != boltstore.FoldedVersion {
		t.Fatalf("after a fold: version %q, want %q", v, boltstore.FoldedVersion)
	}
	db, err = boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatalf("reopen a folded journal: %v", err)
	}
	rec := available("blocked", 0, 9)
	rec.After = []string{"a"}
	update(t, db, func(tx journal.Tx) error { return tx.PutTask(nil, rec) })
	db.Close()
	if v := version(); v != boltstore.FoldedVersion {
		t.Fatalf("after a V2 write on a folded journal: version %q, want %q", v, boltstore.FoldedVersion)
	}
}

// storedVersion reads the schema version stored in the journal in dir,
// straight from the file.
func storedVersion(t *testing.T, dir string) string {
	t.Helper()
	b, err := bolt.Open(boltstore.Path(dir), 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var v string
	b.View(func(tx *bolt.Tx) error { v = string(tx.Bucket([]byte("meta")).Get([]byte("version"))); return nil })
	return v
}

// A system call that fails while the journal is opened says nothing about
// the journal: out of file descriptors, Open used to call the journal
// unreadable, and the CLI then advised `fencectl recover`, which sets a
// sound journal aside. Here the process may open the lock file and not
// the journal (RLIMIT_NOFILE one above the lowest free descriptor).
func TestJournal_OpenOutOfDescriptorsIsNotDamage(t *testing.T) {
	dir := t.TempDir()
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	probe, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(probe)
	low := old
	low.Cur = uint64(probe) + 1 // the lock file gets probe; the journal gets nothing
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		db.Close()
		t.Fatalf("Open with no descriptor left for the journal succeeded")
	}
	if !errors.Is(err, unix.EMFILE) {
		t.Errorf("Open: %v, want it to say EMFILE (too many open files)", err)
	}
	var ce *journal.CorruptError
	if errors.As(err, &ce) {
		t.Errorf("out of descriptors reported as a damaged journal: %v", err)
	}
	db, err = boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatalf("Open once descriptors are back: %v", err)
	}
	db.Close()
}
