package journaltest

import (
	"errors"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/fencectl/fencectl/journal"
	"github.com/fencectl/fencectl/journal/record"
)

// RunBackend runs the contract of making and rebuilding journals (what
// init and recover do through Backend.LockTree). newBackend returns a
// backend and a fresh tree's meta directory, with no journal in either.
func RunBackend(t *testing.T, newBackend func(t *testing.T) (journal.Backend, string)) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, journal.Backend, string)
	}{
		{"Create", testCreate},
		{"CreateTwice", testCreateTwice},
		{"LockTreeExcludes", testLockTreeExcludes},
		{"SetAside", testSetAside},
		{"UpgradeOnV2", testUpgradeOnV2},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, dir := newBackend(t)
			c.fn(t, b, dir)
		})
	}
}

// seed is above T0 in microseconds, as recover's first token is above
// the clock.
var seed = uint64(T0.UnixMicro()) + 1000

func lockTree(t *testing.T, b journal.Backend, dir string) journal.TreeLock {
	t.Helper()
	l, err := b.LockTree(dir, time.Second)
	if err != nil {
		t.Fatalf("LockTree: %v", err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

func exists(t *testing.T, b journal.Backend, dir string) bool {
	t.Helper()
	ok, err := b.Exists(dir)
	if err != nil {
		t.Fatalf("Exists: %v", err)
	}
	return ok
}

// checkCreated opens the journal with open and checks what Create made.
func checkCreated(t *testing.T, open func(journal.OpenOptions) (journal.Store, error), want uint64) {
	t.Helper()
	s, err := open(journal.OpenOptions{Timeout: time.Second})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	view(t, s, func(tx journal.Tx) error {
		if d, err := tx.Defaults(); err != nil || d != Defaults {
			t.Errorf("Defaults = %+v, %v; want %+v", d, err, Defaults)
		}
		if got := tx.LastToken(); got != want {
			t.Errorf("LastToken = %d, want the seed %d", got, want)
		}
		for s, c := range tx.Counts() {
			if c != 0 {
				t.Errorf("a new journal counts %d tasks %s", c, s)
			}
		}
		return nil
	})
	if err := s.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func testCreate(t *testing.T, b journal.Backend, dir string) {
	if exists(t, b, dir) {
		t.Fatal("a fresh directory has a journal")
	}
	if _, err := b.Open(dir, journal.OpenOptions{Timeout: time.Second}); !errors.Is(err, journal.ErrNoJournal) {
		t.Fatalf("Open before Create: %v, want ErrNoJournal", err)
	}
	l := lockTree(t, b, dir)
	if err := l.Create(Defaults, seed); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !exists(t, b, dir) {
		t.Fatal("Exists is false after Create")
	}
	checkCreated(t, l.Open, seed) // under the lock
	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	checkCreated(t, func(o journal.OpenOptions) (journal.Store, error) { return b.Open(dir, o) }, seed)
}

func testCreateTwice(t *testing.T, b journal.Backend, dir string) {
	l := lockTree(t, b, dir)
	if err := l.Create(Defaults, seed); err != nil {
		t.Fatalf("Create: %v", err)
	}
	other := Defaults
	other.MaxAttempts++
	if err := l.Create(other, seed+1); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("a second Create: %v, want fs.ErrExist", err)
	}
	checkCreated(t, l.Open, seed) // the first journal, untouched
}

func testLockTreeExcludes(t *testing.T, b journal.Backend, dir string) {
	l := lockTree(t, b, dir)
	if l2, err := b.LockTree(dir, 50*time.Millisecond); !errors.Is(err, journal.ErrBusy) {
		if err == nil {
			l2.Release()
		}
		t.Fatalf("LockTree while held: %v, want ErrBusy", err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lockTree(t, b, dir) // free again
}

func testSetAside(t *testing.T, b journal.Backend, dir string) {
	l := lockTree(t, b, dir)
	if aside, err := l.SetAside(T0); err != nil || aside != "" {
		t.Fatalf("SetAside with no journal = %q, %v; want \"\", nil", aside, err)
	}
	if err := l.Create(Defaults, seed); err != nil {
		t.Fatalf("Create: %v", err)
	}
	s := l.Salvage()
	if !s.TokenOK || s.Token < seed || !s.DefaultsOK || s.Defaults != Defaults {
		t.Errorf("Salvage of a sound journal = %+v; want the seed %d and %+v", s, seed, Defaults)
	}
	aside, err := l.SetAside(T0)
	if err != nil || aside == "" {
		t.Fatalf("SetAside = %q, %v", aside, err)
	}
	if exists(t, b, dir) {
		t.Fatal("Exists is true after SetAside")
	}
	// The journal set aside still counts: the next one starts above it.
	if s := l.Salvage(); !s.TokenOK || s.Token < seed {
		t.Errorf("Salvage after SetAside = %+v; want a token of at least %d", s, seed)
	}
	if err := l.Create(Defaults, seed+1); err != nil {
		t.Fatalf("Create after SetAside: %v", err)
	}
	checkCreated(t, l.Open, seed+1)
}

// testUpgradeOnV2: a new journal takes records without the fields V2
// adds as an older fencectl writes them, and says nothing; the first
// commit of a record with them (a task with dependencies) raises the
// schema version and calls OnUpgrade once; later commits do not, nor
// does a commit that was rolled back.
func testUpgradeOnV2(t *testing.T, b journal.Backend, dir string) {
	l := lockTree(t, b, dir)
	if err := l.Create(Defaults, seed); err != nil {
		t.Fatalf("Create: %v", err)
	}
	l.Release()
	var calls []string
	s, err := b.Open(dir, journal.OpenOptions{Timeout: time.Second, OnUpgrade: func(from, to string) {
		calls = append(calls, from+"->"+to)
	}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	plain := available("plain", 0, 1)
	update(t, s, func(tx journal.Tx) error { return tx.PutTask(nil, plain) })
	if len(calls) != 0 {
		t.Fatalf("a V1 record upgraded the journal: %v", calls)
	}
	blocked := available("blocked", 0, 2)
	blocked.After, blocked.Labels = []string{"plain"}, []string{"gpu"}
	refused := errors.New("refused")
	if err := s.Update(func(tx journal.Tx) error {
		if err := tx.PutTask(nil, blocked); err != nil {
			return err
		}
		return refused
	}); !errors.Is(err, refused) {
		t.Fatalf("Update = %v, want the function's error", err)
	}
	if len(calls) != 0 {
		t.Fatalf("a rolled-back V2 record upgraded the journal: %v", calls)
	}
	update(t, s, func(tx journal.Tx) error { return tx.PutTask(nil, blocked) })
	if len(calls) != 1 {
		t.Fatalf("OnUpgrade calls after the first V2 record = %v, want one", calls)
	}
	update(t, s, func(tx journal.Tx) error {
		_, err := tx.Append(record.Event{Time: T0, Type: record.EvAdd, Task: "blocked", To: record.Available, After: []string{"plain"}})
		return err
	})
	if len(calls) != 1 {
		t.Errorf("OnUpgrade calls after a second V2 write = %v, want still one", calls)
	}
	// The upgraded journal opens again (its version is read) and holds
	// the record whole.
	s.Close()
	s2, err := b.Open(dir, journal.OpenOptions{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("Open after the upgrade: %v", err)
	}
	defer s2.Close()
	view(t, s2, func(tx journal.Tx) error {
		got, ok, err := tx.Task("blocked")
		if err != nil || !ok || !slices.Equal(got.After, blocked.After) || !slices.Equal(got.Labels, blocked.Labels) {
			t.Errorf("Task(blocked) after the upgrade = %+v, %v, %v", got, ok, err)
		}
		return nil
	})
}
