package fsmirror_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/fencectl/fencectl/fsmirror"
)

func TestStage_MoveFromPublishesTask(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
		name, err := m.Stage("add", strings.NewReader("do the thing"), 1024)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, "add-") || strings.Contains(name, "/") {
			t.Errorf("staging name %q, want add-<hex>", name)
		}
		fi, err := os.Lstat(m.Path(fsmirror.Staging, name))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("staged file: %v", err)
		}
		if err := m.MoveFrom(fsmirror.Staging, name, fsmirror.Available, "t1"); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(m.Path(fsmirror.Available, "t1"))
		if err != nil || string(b) != "do the thing" {
			t.Errorf("published %q, %v", b, err)
		}
		// newTree's cleanup checks that staging is empty again.
	})
}

func TestMoveFrom_RefusesPathsAndExisting(t *testing.T) {
	eachMode(t, func(t *testing.T, m *fsmirror.Mirror) {
		name, err := m.Stage("add", strings.NewReader("x"), -1)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Unstage(name)
		var ine *fsmirror.InvalidNameError
		for _, src := range []string{"", ".", "..", "../tmp/" + name} {
			if err := m.MoveFrom(fsmirror.Staging, src, fsmirror.Available, "t1"); !errors.As(err, &ine) {
				t.Errorf("MoveFrom(%q) = %v, want InvalidNameError", src, err)
			}
		}
		put(t, m, fsmirror.Available, "t1", "old")
		var ee *fsmirror.ExistsError
		if err := m.MoveFrom(fsmirror.Staging, name, fsmirror.Available, "t1"); !errors.As(err, &ee) {
			t.Errorf("MoveFrom onto existing = %v, want ExistsError", err)
		}
	})
}

func TestStage_LimitRemovesPartialFile(t *testing.T) {
	m := newTree(t)
	_, err := m.Stage("add", strings.NewReader(strings.Repeat("x", 11)), 10)
	var tl *fsmirror.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 10 || !strings.Contains(err.Error(), "10 bytes") {
		t.Fatalf("Stage = %v, want TooLargeError naming 10 bytes", err)
	}
	if _, err := m.Stage("add", strings.NewReader(strings.Repeat("x", 10)), 10); err != nil {
		t.Fatalf("Stage at exactly the limit: %v", err)
	}
	// exactly-at-limit file is cleaned up below; the refused one must be gone already.
	entries, _ := m.List(fsmirror.Staging)
	if len(entries) != 1 {
		t.Errorf("staging holds %v, want only the accepted file", entries)
	}
	for _, e := range entries {
		m.Unstage(e.Name)
	}
}

func TestStage_ReadErrorRemovesPartialFile(t *testing.T) {
	m := newTree(t)
	boom := errors.New("boom")
	_, err := m.Stage("add", io.MultiReader(strings.NewReader("partial"), errReader{boom}), -1)
	if !errors.Is(err, boom) {
		t.Fatalf("Stage = %v, want the reader's error", err)
	}
	// newTree's cleanup fails if the partial file was left behind.
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestUnstage_IgnoresMissing(t *testing.T) {
	m := newTree(t)
	name, err := m.Stage("add", strings.NewReader("x"), -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unstage(name); err != nil {
		t.Fatal(err)
	}
	if lexists(t, m.Path(fsmirror.Staging, name)) {
		t.Error("Unstage left the file")
	}
	if err := m.Unstage(name); err != nil {
		t.Errorf("second Unstage: %v", err)
	}
}

func TestWriteAtomic_CreatesAndReplaces(t *testing.T) {
	m := newTree(t)
	for _, content := range []string{"first", "second"} {
		if err := m.WriteAtomic("t1", "result.json", strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(m.Path(fsmirror.Out, "t1/result.json"))
		if err != nil || string(b) != content {
			t.Errorf("out/t1/result.json = %q, %v; want %q", b, err, content)
		}
	}
}

func TestWriteAtomic_Refuses(t *testing.T) {
	m := newTree(t)
	var ine *fsmirror.InvalidNameError
	if err := m.WriteAtomic("t1", "../../claimed/x", strings.NewReader("x")); !errors.As(err, &ine) ||
		!strings.Contains(err.Error(), "output name") {
		t.Errorf("bad output name: %v, want InvalidNameError for the output name", err)
	}
	if err := m.WriteAtomic("../t1", "r", strings.NewReader("x")); !errors.As(err, &ine) {
		t.Errorf("bad task id: %v, want InvalidNameError", err)
	}
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, m.Path(fsmirror.Out, "t2"))
	var nd *fsmirror.NotDirectoryError
	if err := m.WriteAtomic("t2", "r", strings.NewReader("x")); !errors.As(err, &nd) {
		t.Errorf("symlinked out/t2: %v, want NotDirectoryError", err)
	}
	if lexists(t, elsewhere+"/r") {
		t.Error("wrote through a symlink")
	}
}

// TestSweep_LeavesALiveAdoptionAlone: a file an adoption staged is the
// adopter's until it places it; another sweeper (replay on an etcd tree,
// on another host) must not put it back into inbox/ meanwhile. Once the
// adopter has let go (here: moved it on, or died and closed), the file is
// reported for the journal to decide.
func TestSweep_LeavesALiveAdoptionAlone(t *testing.T) {
	adopter := newTree(t)
	put(t, adopter, fsmirror.Inbox, "a1", "job")
	put(t, adopter, fsmirror.Inbox, "a2", "job")
	other, err := fsmirror.Open(adopter.Root())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	b := adopter.NewBatch()
	n1, err := b.Adopt(fsmirror.Inbox, "a1")
	if err != nil {
		t.Fatal(err)
	}
	n2, err := b.Adopt(fsmirror.Inbox, "a2")
	if err != nil {
		t.Fatal(err)
	}
	if _, adopting, err := other.Sweep(true); err != nil || len(adopting) != 0 {
		t.Fatalf("Sweep by another mirror during the adoption: adopting %v, %v; want none (the adopter lives)", adopting, err)
	}
	if err := b.MoveFrom(fsmirror.Staging, n1, fsmirror.Available, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, adopting, err := other.Sweep(true); err != nil || len(adopting) != 0 {
		t.Fatalf("Sweep with a2 still held: adopting %v, %v; want none", adopting, err)
	}
	// The adopter's own later sweep lets go of what it still holds.
	if _, adopting, err := adopter.Sweep(true); err != nil || len(adopting) != 1 || adopting[0] != n2 {
		t.Fatalf("the adopter's own sweep: adopting %v, %v; want [%s]", adopting, err, n2)
	}
	if _, adopting, err := other.Sweep(true); err != nil || len(adopting) != 1 || adopting[0] != n2 {
		t.Fatalf("Sweep once the adopter let go: adopting %v, %v; want [%s]", adopting, err, n2)
	}
	if err := b.MoveFrom(fsmirror.Staging, n2, fsmirror.Available, "a2"); err != nil {
		t.Fatal(err)
	}
}

// An adopted file's content exists nowhere else, and whoever wrote it need
// not have synced it (`echo job > x && mv x inbox/`): SyncStaged, which
// runs before the commit that adopts it, makes it durable, one fdatasync
// per file, or one syncfs for many, and then the staging directory.
func TestAdopt_SyncStagedMakesContentsDurable(t *testing.T) {
	for _, n := range []int{2, 40} {
		m := newTree(t)
		var log []string
		m.Trace = func(op, a, _ string) { log = append(log, op+" "+a) }
		b := m.NewBatch()
		var staged []string
		for i := range n {
			id := fmt.Sprintf("a%d", i)
			put(t, m, fsmirror.Inbox, id, "job")
			name, err := b.Adopt(fsmirror.Inbox, id)
			if err != nil {
				t.Fatal(err)
			}
			staged = append(staged, name)
		}
		log = nil
		if err := b.SyncStaged(); err != nil {
			t.Fatal(err)
		}
		joined := strings.Join(log, "\n")
		if n > 2 {
			if !strings.Contains(joined, "syncfs "+m.Path(fsmirror.Staging, "")) {
				t.Errorf("%d files staged: no syncfs before the commit:\n%s", n, joined)
			}
		} else {
			for _, name := range staged {
				if !strings.Contains(joined, "datasync "+m.Path(fsmirror.Staging, name)) {
					t.Errorf("%s's content was not synced before the commit:\n%s", name, joined)
				}
			}
		}
		if !strings.Contains(joined, "sync "+m.Path(fsmirror.Staging, "")) {
			t.Errorf("the staging directory was not synced before the commit:\n%s", joined)
		}
		for i, name := range staged {
			if err := b.MoveFrom(fsmirror.Staging, name, fsmirror.Available, fmt.Sprintf("a%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
}
