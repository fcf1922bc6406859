package bolt_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencectl/fencectl/journal"
	boltstore "github.com/fencectl/fencectl/journal/bolt"
)

// newTreeJournal makes a journal in <tmp>/.fence, as a tree has it, so the
// ceiling's root copy lands in <tmp> and nowhere shared.
func newTreeJournal(t *testing.T) (db *boltstore.DB, dir string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), ".fence")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		t.Fatal(err)
	}
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dir
}

func nextToken(t *testing.T, db *boltstore.DB, now time.Time) uint64 {
	t.Helper()
	var tok uint64
	update(t, db, func(tx journal.Tx) (err error) {
		tok, err = tx.NextToken(now)
		return err
	})
	return tok
}

func ceilingOnFile(t *testing.T, dir string) uint64 {
	t.Helper()
	c, ok, err := journal.ReadCeiling(dir)
	if err != nil || !ok {
		t.Fatalf("ReadCeiling = %d, %v, %v; want a ceiling", c, ok, err)
	}
	return c
}

// inode identifies the file at path: a rewrite (temp file renamed over
// it) changes it, so an unchanged inode means no write and no sync.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// Every token issued is at or below the ceiling on file, in both copies,
// and the files are written once per CeilingStep, not once per claim.
func TestCeiling_BoundsEveryTokenAndIsRarelyWritten(t *testing.T) {
	db, dir := newTreeJournal(t)
	if _, ok, _ := journal.ReadCeiling(dir); ok {
		t.Fatal("a new journal has ceiling files before its first claim")
	}
	first := nextToken(t, db, t0)
	paths := journal.CeilingPaths(dir)
	ino := []uint64{inode(t, paths[0]), inode(t, paths[1])}
	c := ceilingOnFile(t, dir)
	if c < first+journal.CeilingStep {
		t.Fatalf("ceiling %d, want at least token %d + step", c, first)
	}
	// A thousand claims, the clock moving by a millisecond each: no write.
	now := t0
	for i := 0; i < 1000; i++ {
		now = now.Add(time.Millisecond)
		if tok := nextToken(t, db, now); tok > c {
			t.Fatalf("token %d above the ceiling %d on file", tok, c)
		}
	}
	for i, p := range paths {
		if inode(t, p) != ino[i] {
			t.Errorf("%s rewritten within the ceiling", p)
		}
	}
	// The clock passes the ceiling: one raise, and the token is below it.
	later := t0.Add(3 * time.Hour)
	tok := nextToken(t, db, later)
	if c2 := ceilingOnFile(t, dir); tok > c2 || c2 <= c {
		t.Fatalf("after passing the ceiling: token %d, ceiling %d (was %d)", tok, c2, c)
	}
	for _, p := range paths {
		if v := copyValue(t, p); v < tok {
			t.Errorf("copy %s holds %d, below token %d", p, v, tok)
		}
	}
}

// copyValue reads one copy of the ceiling: its first line that is not a
// comment (a witness line may follow it).
func copyValue(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			first = line
			break
		}
	}
	v, err := strconv.ParseUint(first, 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// A crash between the raise and its commit (here: the transaction that
// raised is rolled back) leaves the files above the journal's copy. Its
// token was never handed out, but the files are never lowered, every
// token committed afterwards is still above the last committed one and
// below the files, and once the journal's own ceiling is passed the next
// token goes above what the files record.
func TestCeiling_CrashBetweenRaiseAndCommit(t *testing.T) {
	db, dir := newTreeJournal(t)
	first := nextToken(t, db, t0)
	c := ceilingOnFile(t, dir)

	// The clock jumps a day ahead; the raise happens, the commit does not.
	errCrash := errors.New("crash before commit")
	err := db.Update(func(tx journal.Tx) error {
		if _, err := tx.NextToken(t0.Add(24 * time.Hour)); err != nil {
			return err
		}
		return errCrash
	})
	if !errors.Is(err, errCrash) {
		t.Fatalf("Update = %v", err)
	}
	raised := ceilingOnFile(t, dir)
	if raised <= c {
		t.Fatalf("ceiling %d after the lost raise, want above %d", raised, c)
	}
	// The clock comes back: below the journal's own ceiling, no raise.
	tok := nextToken(t, db, t0)
	if tok <= first || tok > raised {
		t.Fatalf("token %d, want above %d and at most the ceiling %d", tok, first, raised)
	}
	// Past the journal's ceiling: the files know more, so above them.
	tok = nextToken(t, db, t0.Add(2*time.Hour))
	if tok <= raised {
		t.Fatalf("token %d not above the ceiling %d that the files record", tok, raised)
	}
	if got := ceilingOnFile(t, dir); got < tok {
		t.Fatalf("ceiling %d below the token %d", got, tok)
	}
}

// A ceiling is never lowered, and a damaged copy is read as an error (the
// other copy still counts) and rewritten by the next raise.
func TestCeiling_NeverLoweredDamagedCopyReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".fence")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := journal.RaiseCeiling(dir, 5000); err != nil {
		t.Fatal(err)
	}
	if err := journal.RaiseCeiling(dir, 100); err != nil {
		t.Fatal(err)
	}
	if got := ceilingOnFile(t, dir); got != 5000 {
		t.Fatalf("ceiling %d after raising to 5000 then 100, want 5000", got)
	}
	paths := journal.CeilingPaths(dir)
	if err := os.WriteFile(paths[0], []byte("12x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v, ok, err := journal.ReadCeiling(dir)
	var ce *journal.CeilingError
	if !errors.As(err, &ce) || ce.Path != paths[0] {
		t.Fatalf("ReadCeiling of a garbled copy: err = %v, want *CeilingError for %s", err, paths[0])
	}
	if !ok || v != 5000 {
		t.Fatalf("ReadCeiling = %d, %v: the intact root copy must still count", v, ok)
	}
	if err := journal.RaiseCeiling(dir, 6000); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := journal.ReadCeiling(dir); err != nil || !ok || v != 6000 {
		t.Fatalf("after a raise: %d, %v, %v; want 6000 in both copies", v, ok, err)
	}
	// A huge number is not a ceiling: tokens would overflow above it.
	if err := os.WriteFile(paths[1], []byte("18446744073709551615\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := journal.ReadCeiling(dir); !errors.As(err, &ce) {
		t.Fatalf("ReadCeiling of 2^64-1: err = %v, want *CeilingError", err)
	}
}

// SalvageToken reads the highest of the counter, the ceiling and the
// highest claimed token of a journal.
func TestCeiling_SalvageSeesCeiling(t *testing.T) {
	db, dir := newTreeJournal(t)
	tok := nextToken(t, db, t0)
	db.Close()
	got, ok := boltstore.SalvageToken(boltstore.Path(dir))
	if !ok || got < tok+journal.CeilingStep {
		t.Fatalf("SalvageToken = %d, %v; want at least the ceiling %d", got, ok, tok+journal.CeilingStep)
	}
}

// A version 2 journal (before the ceiling) is read as it is; its first
// write marks it version 3, so an older fencectl, which would issue tokens
// past the ceiling, refuses it from then on.
func TestCeiling_Version2MarkedOnFirstWrite(t *testing.T) {
	db, dir := newTreeJournal(t)
	db.Close()
	setVersion := func(v string) {
		b, err := bolt.Open(boltstore.Path(dir), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := b.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("version"), []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	version := func() (v string) {
		b, err := bolt.Open(boltstore.Path(dir), 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		b.View(func(tx *bolt.Tx) error { v = string(tx.Bucket([]byte("meta")).Get([]byte("version"))); return nil })
		return v
	}
	setVersion("2")
	ro, err := boltstore.Open(dir, journal.OpenOptions{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatalf("Open of a version 2 journal: %v", err)
	}
	ro.Close()
	if v := version(); v != "2" {
		t.Fatalf("a read changed the version to %q", v)
	}
	db, err = boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	nextToken(t, db, t0)
	db.Close()
	if v := version(); v != "3" {
		t.Fatalf("version after the first write = %q, want 3", v)
	}
}

// A journal.db put back from an older copy (a backup, a snapshot) has an
// old counter and an old copy of the ceiling. Tokens issued since then are
// above both; the files still know, so the first claim through a fresh
// handle goes above them, even with the clock behind.
func TestCeiling_JournalRestoredFromBackup(t *testing.T) {
	db, dir := newTreeJournal(t)
	nextToken(t, db, t0)
	backup, err := os.ReadFile(boltstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	// After the backup, the clock runs ahead: a raise, and a token far
	// above anything the backup knows.
	issued := nextToken(t, db, t0.Add(5*time.Hour))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(boltstore.Path(dir), backup, 0o600); err != nil {
		t.Fatal(err)
	}
	restored, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	// The clock is back at the backup's time.
	if tok := nextToken(t, restored, t0.Add(time.Second)); tok <= issued {
		t.Fatalf("token %d after restoring the backup, want above %d, issued after it", tok, issued)
	}
}

// The witness names a token issued, never one a rollback (or a crash
// before the commit) took back: it is written after the commit. A witness
// of a token never issued would make the next claim take the journal for
// a restored copy and jump over the ceiling, at every such crash.
func TestWitness_WrittenOnlyAfterTheCommit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".fence")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := boltstore.Create(dir, defaults, t0); err != nil {
		t.Fatal(err)
	}
	clock := t0
	db, err := boltstore.Open(dir, journal.OpenOptions{Timeout: time.Second, Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	first := nextToken(t, db, t0) // raises the ceiling; witnessed after its commit
	if _, w, _, _ := journal.ReadCeilingWitness(dir); w.Token != first {
		t.Fatalf("witness %d after the first claim, want its token %d", w.Token, first)
	}
	// Long enough later that the witness is due again; the transaction
	// that issues the token is rolled back.
	later := t0.Add(time.Minute)
	clock = later
	refused := errors.New("refused")
	var rolledBack uint64
	err = db.Update(func(tx journal.Tx) (err error) {
		if rolledBack, err = tx.NextToken(later); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("Update = %v, want the refusal", err)
	}
	if _, w, _, _ := journal.ReadCeilingWitness(dir); w.Token != first {
		t.Fatalf("after a rolled-back claim of token %d the witness is %d, want %d (a token issued)", rolledBack, w.Token, first)
	}
	// The next claim follows on: no jump over the ceiling.
	if next := nextToken(t, db, later.Add(time.Second)); next <= first || next-first >= journal.CeilingStep/2 {
		t.Fatalf("token %d after %d: jumped", next, first)
	}
}
