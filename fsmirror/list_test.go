package fsmirror_test

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

func TestList_Kinds(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Claimed, "b-file", "")
	put(t, m, fsmirror.Claimed, ".hidden", "")
	os.Symlink("b-file", m.Path(fsmirror.Claimed, "a-link"))
	os.Mkdir(m.Path(fsmirror.Claimed, "c-dir"), 0o755)
	if err := unix.Mkfifo(m.Path(fsmirror.Claimed, "d-fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []fsmirror.Entry
	var err error
	within(t, func() { got, err = m.List(fsmirror.Claimed) })
	if err != nil {
		t.Fatal(err)
	}
	want := []fsmirror.Entry{
		{Name: ".hidden", Kind: fsmirror.Regular},
		{Name: "a-link", Kind: fsmirror.Symlink},
		{Name: "b-file", Kind: fsmirror.Regular},
		{Name: "c-dir", Kind: fsmirror.Directory},
		{Name: "d-fifo", Kind: fsmirror.FIFO},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List =\n%v\nwant\n%v", got, want)
	}
	kinds := map[fsmirror.Kind]string{
		fsmirror.Regular: "file", fsmirror.Symlink: "symlink", fsmirror.Directory: "directory",
		fsmirror.FIFO: "fifo", fsmirror.Other: "other",
	}
	for k, s := range kinds {
		if k.String() != s {
			t.Errorf("Kind %q String() = %q", s, k.String())
		}
	}
}

func TestList_EmptyDir(t *testing.T) {
	m := newTree(t)
	got, err := m.List(fsmirror.Done)
	if err != nil || len(got) != 0 {
		t.Errorf("List(done) = %v, %v; want empty", got, err)
	}
}

func TestScanInbox_SplitsAndLeavesRejectedInPlace(t *testing.T) {
	m := newTree(t)
	put(t, m, fsmirror.Inbox, "t2", "")
	put(t, m, fsmirror.Inbox, "t1", "")
	put(t, m, fsmirror.Inbox, "bad name", "")
	put(t, m, fsmirror.Inbox, ".in-progress", "")
	os.Symlink("/etc/passwd", m.Path(fsmirror.Inbox, "link"))
	if err := unix.Mkfifo(m.Path(fsmirror.Inbox, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(m.Path(fsmirror.Inbox, "sub"), 0o755)

	var valid []string
	var rejected []fsmirror.Rejected
	var err error
	within(t, func() { valid, rejected, _, err = m.ScanInbox(0) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"t1", "t2"}; !reflect.DeepEqual(valid, want) {
		t.Errorf("valid = %q, want %q", valid, want)
	}
	wantWhy := map[string]struct {
		kind fsmirror.Kind
		why  string
	}{
		"bad name": {fsmirror.Regular, `invalid task id "bad name"`},
		"link":     {fsmirror.Symlink, "symlink: refused, never followed"},
		"pipe":     {fsmirror.FIFO, "fifo: not a regular file"},
		"sub":      {fsmirror.Directory, "directory: not a regular file"},
	}
	if len(rejected) != len(wantWhy) {
		t.Errorf("rejected = %v, want %d entries (dotfile ignored)", rejected, len(wantWhy))
	}
	for _, r := range rejected {
		w, ok := wantWhy[r.Name]
		if !ok {
			t.Errorf("unexpected rejected entry %+v", r)
			continue
		}
		if r.Kind != w.kind || !strings.Contains(r.Why, w.why) {
			t.Errorf("rejected %q = {%s, %q}, want {%s, ~%q}", r.Name, r.Kind, r.Why, w.kind, w.why)
		}
	}
	for _, name := range []string{"t1", "t2", "bad name", ".in-progress", "link", "pipe", "sub"} {
		if !lexists(t, m.Path(fsmirror.Inbox, name)) {
			t.Errorf("ScanInbox removed %q", name)
		}
	}

	// Adoption is the caller's Move; afterwards the inbox holds only rejects.
	for _, id := range valid {
		if err := m.Move(id, fsmirror.Inbox, fsmirror.Available); err != nil {
			t.Fatal(err)
		}
	}
	if valid, _, _, _ := m.ScanInbox(0); len(valid) != 0 {
		t.Errorf("valid after adoption = %q", valid)
	}
}

// ScanInbox(most) reads no further than most valid entries and says there
// is more: a writer adopts a bounded number per turn of the lock.
func TestScanInbox_BoundedSaysMore(t *testing.T) {
	m := newTree(t)
	for i := range 1200 {
		put(t, m, fsmirror.Inbox, fmt.Sprintf("t%04d", i), "")
	}
	put(t, m, fsmirror.Inbox, ".in-progress", "")
	valid, _, more, err := m.ScanInbox(500)
	if err != nil {
		t.Fatal(err)
	}
	if len(valid) != 500 || !more {
		t.Errorf("ScanInbox(500) of 1200 files: %d valid, more %v; want 500, true", len(valid), more)
	}
	// The next scan goes on where that one stopped, to the end, then
	// round from the start: every file once.
	valid, _, more, err = m.ScanInbox(1200)
	if err != nil {
		t.Fatal(err)
	}
	if len(valid) != 1200 || more || len(slices.Compact(slices.Clone(valid))) != 1200 {
		t.Errorf("ScanInbox(1200) after ScanInbox(500) of 1200 files: %d valid, more %v; want the 700 after the cursor and the 500 before it, once each", len(valid), more)
	}
	valid, _, more, err = m.ScanInbox(1200)
	if err != nil {
		t.Fatal(err)
	}
	if len(valid) != 1200 || more {
		t.Errorf("ScanInbox(1200) of 1200 files: %d valid, more %v; want 1200, false", len(valid), more)
	}
	if valid, _, more, _ := m.ScanInbox(0); len(valid) != 1200 || more {
		t.Errorf("ScanInbox(0): %d valid, more %v; want all 1200", len(valid), more)
	}
}

// A bounded scan goes on where the last one stopped, in this process or
// (through .fence/inbox-cursor) the next: files left in inbox/ (a task
// of that id exists, a hard link) must not keep the writers from the
// files after them. Before, every scan read the same first entries, and
// files past them were never adopted.
func TestScanInbox_GoesOnPastWhatIsLeft(t *testing.T) {
	m := newTree(t)
	want := map[string]bool{}
	for i := range 1000 {
		id := fmt.Sprintf("t%04d", i)
		put(t, m, fsmirror.Inbox, id, "")
		want[id] = true
	}
	for i := range 300 {
		put(t, m, fsmirror.Inbox, fmt.Sprintf("bad name %d", i), "") // rejected
	}
	seen := map[string]bool{}
	for turn := range 8 {
		mm := m // turns 0 to 3: one process, its own position
		if turn >= 4 {
			var err error
			if mm, err = fsmirror.Open(m.Root()); err != nil { // a new process: the cursor file
				t.Fatal(err)
			}
			defer mm.Close()
		}
		valid, rejected, _, err := mm.ScanInbox(100)
		if err != nil {
			t.Fatal(err)
		}
		if len(valid) > 100 || len(valid)+len(rejected) > 400 {
			t.Fatalf("turn %d read %d valid and %d rejected entries; want at most 100 and 400 in all", turn, len(valid), len(rejected))
		}
		for _, id := range valid {
			seen[id] = true
		}
		// Nothing is moved: every file is left, as a refused one is.
	}
	if len(seen) < 700 {
		t.Errorf("8 scans of at most 100 (nothing adopted in between) saw %d of the 1000 valid files; want at least 700: each scan goes on where the last stopped", len(seen))
	}
}

// A cursor past every entry (garbage, or stale after inbox/ was emptied
// and filled again) does not make a turn find nothing: the scan from it
// comes round to the start. Before, a claim said there was nothing to
// claim with 300 files in inbox/ (found from outside).
func TestScanInbox_CursorPastTheEndComesRound(t *testing.T) {
	m := newTree(t)
	for i := range 300 {
		put(t, m, fsmirror.Inbox, fmt.Sprintf("e%03d", i), "")
	}
	cursor := m.Path(fsmirror.Meta, "inbox-cursor")
	if err := os.WriteFile(cursor, []byte(fmt.Sprintf("%-23d\n", int64(9223372036854775000))), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh, err := fsmirror.Open(m.Root()) // a new process reads the cursor
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	valid, _, _, err := fresh.ScanInbox(100)
	if err != nil {
		t.Fatal(err)
	}
	if len(valid) != 100 {
		t.Errorf("a turn with the cursor past every entry took %d of 300 files, want 100", len(valid))
	}
}
