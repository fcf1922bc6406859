package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestArgs_NULIsRefused: no process can receive a NUL in argv (the kernel
// takes C strings; the torture suite's hostile trees check that exec
// refuses it), so every command is given one in process, past the kernel:
// each must refuse it with exit 2, naming it as \x00, never printing the
// raw byte.
func TestArgs_NULIsRefused(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	if code, _, stderr := runCLI("--dir", tree, "init"); code != 0 {
		t.Fatalf("init: %s", stderr)
	}
	for _, args := range [][]string{
		{"add", "--id", "a\x00b"}, {"add", "--id", "\x00"}, {"claim", "t\x00"}, {"show", "a\x00b"},
		{"complete", "a\x00b", "--token", "5"}, {"log", "--task", "\x00x"},
		{"put", "t1", "r\x00x", "--token", "5"}, {"claim", "--request-id", "r\x00"},
	} {
		code, _, stderr := runCLI(append([]string{"--dir", tree}, args...)...)
		what := fmt.Sprintf("%q", args)
		if code != exitUsage || !strings.Contains(stderr, `\x00`) {
			t.Errorf("%s: exit %d, want %d and a message naming \\x00:\n%s", what, code, exitUsage, stderr)
		}
		for i := 0; i < len(stderr); i++ {
			if c := stderr[i]; (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
				t.Errorf("%s: raw control character %#02x in the message: %q", what, c, stderr)
				break
			}
		}
	}
}
