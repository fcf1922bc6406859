package fsmirror_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencectl/fencectl/fsmirror"
)

// Fuzz targets of the torture suite (part 4). Each runs over its seed
// corpus (the f.Add calls and testdata/fuzz/<Name>/) in a plain `go test`;
// `go test -fuzz=FuzzX -run '^FuzzX$' ./fsmirror/` explores further.

// idPattern is the id rule of DESIGN.md, written independently of
// ValidateID's hand-written checker.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// maxIDMessage bounds ValidateID's error message, whatever the input size:
// a huge or binary name must not flood a terminal or a log line.
const maxIDMessage = 400

// FuzzValidateID: ValidateID never panics, accepts exactly the ids the rule
// describes (checked against an independent regexp), never accepts ".",
// "..", '/' or NUL, and explains a refusal in a bounded message that names
// the rule.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{
		"t1", "Task_2.v-3", "0abc", ".", "..", "../x", "/etc/passwd", "a/b", "a\x00b",
		"", "-rf", ".hidden", "_x", "a b", "a\nb", "a\x1b[31m", "t\u0430sk", "a\xffb",
		"ｔａｓｋ", "task\u200b", "tas\u212a", "\u202etxt.exe", "a..", "a/", "a.", "a-",
		strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("\xff", 128),
		strings.Repeat("\x01", 64) + "a", strings.Repeat("x/", 5*1024),
		"a" + strings.Repeat("\x01", 127), "a" + strings.Repeat("\u2028", 42),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := fsmirror.ValidateID(id)
		want := idPattern.MatchString(id)
		if (err == nil) != want {
			t.Fatalf("ValidateID(%q) = %v, but the rule says valid=%v", id, err, want)
		}
		if err == nil {
			if id == "." || id == ".." || strings.ContainsAny(id, "/\x00") || len(id) > 128 || id == "" {
				t.Fatalf("ValidateID accepted %q", id)
			}
			return
		}
		var ine *fsmirror.InvalidNameError
		if !errors.As(err, &ine) {
			t.Fatalf("ValidateID(%q) = %T %v, want *InvalidNameError", id, err, err)
		}
		if ine.Name != id {
			t.Fatalf("InvalidNameError.Name = %q, want the input %q", ine.Name, id)
		}
		msg := err.Error()
		if len(msg) >= maxIDMessage {
			t.Fatalf("message for a %d-byte id is %d bytes (limit %d): %.200q...", len(id), len(msg), maxIDMessage, msg)
		}
		if !strings.Contains(msg, "[A-Za-z0-9][A-Za-z0-9._-]{0,127}") {
			t.Fatalf("message %q does not name the rule", msg)
		}
		// The message is safe to print: no raw control characters and
		// valid UTF-8, whatever the id held.
		for _, r := range msg {
			if r < 0x20 || r == 0x7f || r == 0xfffd && !strings.Contains(id, "\ufffd") {
				t.Fatalf("message %q holds a raw control or invalid character %U", msg, r)
			}
		}
	})
}

// Entry kinds FuzzScanInbox plants, chosen by a fuzz byte.
const (
	plantFile = iota
	plantDir
	plantSymlinkOut    // symlink to a file outside the tree
	plantFIFO          // named pipe: opening it would block
	plantSymlinkDir    // symlink to a directory outside the tree
	plantDangling      // symlink to nothing
	plantSocket        // unix socket
	plantHardlink      // hard link to the outside file: a regular file
	plantUnreadable    // regular file with mode 0
	plantSymlinkInside // symlink to a file in available/
	numPlants
)

// FuzzScanInbox drops entries named by the fuzz input into inbox/, of
// kinds chosen by the fuzz bytes, and checks ScanInbox: it returns within a
// bound (a FIFO cannot block it), valid holds exactly the regular files with
// valid names, sorted; every other entry not starting with "." is rejected
// with its real kind and a reason; nothing is deleted, moved or written,
// inside the inbox or outside the tree.
//
// names is split on '/' (a character no file name can hold).
func FuzzScanInbox(f *testing.F) {
	f.Add("t1/t2/bad@name/.tmp-write/link/fifo1/dir1", []byte{0, 0, 0, 0, 2, 3, 1})
	f.Add("a/../b/./c", []byte{1, 0, 4, 5})
	f.Add("t\u0430sk/ok/.hidden-fifo/-dash/sock", []byte{0, 0, 3, 0, 6})
	f.Add(strings.Repeat("a", 128)+"/"+strings.Repeat("b", 129)+"/"+strings.Repeat("c", 300), []byte{0, 0, 0})
	f.Add("x\ny/\x1b[2J/a\x00b/\xff\xfe/hard/zero", []byte{0, 0, 0, 0, 7, 8})
	f.Add("inside/UPPER/lower/.", []byte{9, 0, 0, 1})
	f.Add("", []byte{})

	root := f.TempDir()
	m, err := fsmirror.Create(filepath.Join(root, "tree"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	outside := filepath.Join(root, "outside")
	if err := os.MkdirAll(filepath.Join(outside, "dir"), 0o755); err != nil {
		f.Fatal(err)
	}
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("outside the tree\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(m.Path(fsmirror.Available, "target"), []byte("a task\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	inbox := m.Path(fsmirror.Inbox, "")

	f.Fuzz(func(t *testing.T, names string, kinds []byte) {
		// Start from an empty inbox (the tree is shared by the inputs of
		// one fuzz worker; making a tree per input would fsync a lot).
		clearDir(t, inbox)
		outsideBefore := snapshot(t, outside)

		planted := map[string]fsmirror.Kind{}
		var listeners []net.Listener
		defer func() {
			for _, l := range listeners {
				l.Close()
			}
		}()
		for i, name := range strings.Split(names, "/") {
			if len(planted) >= 32 {
				break
			}
			kind := byte(plantFile)
			if i < len(kinds) {
				kind = kinds[i] % numPlants
			}
			p := filepath.Join(inbox, name)
			if name == "" || name == "." || name == ".." || filepath.Base(p) != name || strings.ContainsRune(name, 0) {
				// Not a single file name: nothing the OS can create. (A
				// NUL must be skipped before bind(2), which would cut the
				// socket path at it and bind the inbox's own path.)
				continue
			}
			if _, dup := planted[name]; dup {
				continue
			}
			var err error
			var k fsmirror.Kind
			switch kind {
			case plantFile:
				err, k = os.WriteFile(p, []byte("task "+name), 0o644), fsmirror.Regular
			case plantDir:
				err, k = os.Mkdir(p, 0o755), fsmirror.Directory
				if err == nil {
					err = os.WriteFile(filepath.Join(p, "inner"), nil, 0o644)
				}
			case plantSymlinkOut:
				err, k = os.Symlink(secret, p), fsmirror.Symlink
			case plantFIFO:
				err, k = unix.Mkfifo(p, 0o644), fsmirror.FIFO
			case plantSymlinkDir:
				err, k = os.Symlink(filepath.Join(outside, "dir"), p), fsmirror.Symlink
			case plantDangling:
				err, k = os.Symlink(filepath.Join(outside, "nothing-here"), p), fsmirror.Symlink
			case plantSocket:
				if len(p) >= 100 { // sun_path limit
					continue
				}
				var l net.Listener
				l, err = net.Listen("unix", p)
				if err == nil {
					l.(*net.UnixListener).SetUnlinkOnClose(false)
					listeners = append(listeners, l)
				}
				k = fsmirror.Other
			case plantHardlink:
				err, k = os.Link(secret, p), fsmirror.Regular
			case plantUnreadable:
				err, k = os.WriteFile(p, []byte("x"), 0), fsmirror.Regular
			case plantSymlinkInside:
				err, k = os.Symlink("../available/target", p), fsmirror.Symlink
			}
			if err != nil {
				// The OS refused the name (NUL, too long, ...): skip it.
				var errno unix.Errno
				if errors.As(err, &errno) && (errno == unix.EINVAL || errno == unix.ENAMETOOLONG || errno == unix.EEXIST) {
					continue
				}
				if strings.Contains(err.Error(), "invalid argument") {
					continue
				}
				t.Fatalf("plant %q (kind %d): %v", name, kind, err)
			}
			planted[name] = k
		}
		inboxBefore := snapshot(t, inbox)

		var valid []string
		var rejected []fsmirror.Rejected
		done := make(chan error, 1)
		go func() {
			var err error
			valid, rejected, _, err = m.ScanInbox(0)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("ScanInbox: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("ScanInbox blocked (opened a FIFO?)")
		}

		if !slices.IsSorted(valid) {
			t.Errorf("valid not sorted: %q", valid)
		}
		seen := map[string]string{}
		for _, id := range valid {
			if prev, ok := seen[id]; ok {
				t.Errorf("%q listed twice (%s and valid)", id, prev)
			}
			seen[id] = "valid"
			k, ok := planted[id]
			switch {
			case !ok:
				t.Errorf("valid %q was never planted", id)
			case k != fsmirror.Regular:
				t.Errorf("valid %q is a %s, not a regular file", id, k)
			}
			if err := fsmirror.ValidateID(id); err != nil || !idPattern.MatchString(id) {
				t.Errorf("valid %q breaks the id rule: %v", id, err)
			}
		}
		for _, r := range rejected {
			if prev, ok := seen[r.Name]; ok {
				t.Errorf("%q listed twice (%s and rejected)", r.Name, prev)
			}
			seen[r.Name] = "rejected"
			k, ok := planted[r.Name]
			if !ok {
				t.Errorf("rejected %q was never planted", r.Name)
				continue
			}
			if r.Kind != k {
				t.Errorf("rejected %q has kind %s, want %s", r.Name, r.Kind, k)
			}
			if r.Why == "" {
				t.Errorf("rejected %q has no reason", r.Name)
			}
			if k == fsmirror.Regular && fsmirror.ValidateID(r.Name) == nil {
				t.Errorf("regular file %q with a valid name was rejected: %s", r.Name, r.Why)
			}
			if strings.HasPrefix(r.Name, ".") {
				t.Errorf("dotfile %q should be skipped silently, not rejected", r.Name)
			}
		}
		for name := range planted {
			_, listed := seen[name]
			if strings.HasPrefix(name, ".") {
				if listed {
					t.Errorf("dotfile %q was listed as %s", name, seen[name])
				}
				continue
			}
			if !listed {
				t.Errorf("entry %q (%s) is neither valid nor rejected", name, planted[name])
			}
		}

		if after := snapshot(t, inbox); !equalSnapshots(inboxBefore, after) {
			t.Errorf("ScanInbox changed inbox/:\nbefore %v\nafter  %v", inboxBefore, after)
		}
		if after := snapshot(t, outside); !equalSnapshots(outsideBefore, after) {
			t.Errorf("ScanInbox changed the outside directory:\nbefore %v\nafter  %v", outsideBefore, after)
		}
	})
}

// fileState is what snapshot records of one entry.
type fileState struct {
	Mode    os.FileMode
	Size    int64
	ModTime time.Time
	Content []byte // regular files only (small in these tests)
}

// snapshot records every entry below dir without following symlinks.
func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fileState{Mode: fi.Mode(), Size: fi.Size(), ModTime: fi.ModTime()}
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o400 != 0 {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			st.Content = b
		}
		if fi.IsDir() {
			st.Size, st.ModTime = 0, time.Time{} // a directory's own size/mtime are not content
		}
		out[p] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equalSnapshots(a, b map[string]fileState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || x.Mode != y.Mode || x.Size != y.Size || !x.ModTime.Equal(y.ModTime) || !bytes.Equal(x.Content, y.Content) {
			return false
		}
	}
	return true
}

// clearDir removes every entry of dir (not dir itself).
func clearDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}
