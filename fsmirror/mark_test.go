package fsmirror_test

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/fencectl/fencectl/fsmirror"
)

func TestMark_RoundTrip(t *testing.T) {
	m := newTree(t)
	if got := m.ReadMark(); got != "" {
		t.Fatalf("ReadMark on a new tree = %q; want empty", got)
	}
	m.WriteMark("01TREE 42 0000000000000007")
	m.WriteMark("01TREE 43 00000000000000080000000000000009") // longer, then shorter
	m.WriteMark("01TREE 44 0a")
	if got := m.ReadMark(); got != "01TREE 44 0a" {
		t.Fatalf("ReadMark = %q; want the last mark written", got)
	}
	st, err := os.Stat(m.Path(fsmirror.Meta, fsmirror.MarkName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mark mode = %v; want 0600", st.Mode().Perm())
	}
}

// Anything but a whole mark reads as no mark: the next writer then checks
// the last commit in full, which is always safe.
func TestMark_DamagedReadsEmpty(t *testing.T) {
	for name, content := range map[string]string{
		"empty":      "",
		"torn":       "01TREE 44 0a   ",
		"no newline": strings.Repeat("x", 128),
		"two lines":  "a\nb" + strings.Repeat(" ", 124) + "\n",
		"too long":   strings.Repeat("x", 200) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			m := newTree(t)
			if err := os.WriteFile(m.Path(fsmirror.Meta, fsmirror.MarkName), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := m.ReadMark(); got != "" {
				t.Errorf("ReadMark = %q; want empty", got)
			}
		})
	}
}

// A mark that cannot be written must not leave an older one behind to
// vouch for a later commit.
func TestMark_UnwritableDropsOld(t *testing.T) {
	m := newTree(t)
	m.WriteMark("01TREE 1 01")
	m.WriteMark(strings.Repeat("x", 300)) // too long for the record
	if got := m.ReadMark(); got != "" {
		t.Errorf("ReadMark after a failed write = %q; want empty", got)
	}
	m.WriteMark("bad\nmark")
	if got := m.ReadMark(); got != "" {
		t.Errorf("ReadMark after a mark with a newline = %q; want empty", got)
	}
}

// The mark is never followed through a symlink, and a FIFO in its place
// neither blocks nor counts.
func TestMark_OddEntries(t *testing.T) {
	t.Run("symlink", func(t *testing.T) {
		m := newTree(t)
		target := m.Path(fsmirror.Meta, "elsewhere")
		line := "01TREE 5 05" + strings.Repeat(" ", 128-12) + "\n"
		if err := os.WriteFile(target, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, m.Path(fsmirror.Meta, fsmirror.MarkName)); err != nil {
			t.Fatal(err)
		}
		if got := m.ReadMark(); got != "" {
			t.Errorf("ReadMark through a symlink = %q; want empty", got)
		}
		m.WriteMark("01TREE 6 06")
		if b, _ := os.ReadFile(target); string(b) != line {
			t.Errorf("WriteMark wrote through the symlink: target now %q", b)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		m := newTree(t)
		if err := syscall.Mkfifo(m.Path(fsmirror.Meta, fsmirror.MarkName), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := m.ReadMark(); got != "" {
			t.Errorf("ReadMark of a FIFO = %q; want empty", got)
		}
		m.WriteMark("01TREE 7 07") // must return, not block; drops the FIFO
		m.WriteMark("01TREE 8 08")
		if got := m.ReadMark(); got != "01TREE 8 08" {
			t.Errorf("ReadMark once the FIFO is gone = %q; want the new mark", got)
		}
	})
}
