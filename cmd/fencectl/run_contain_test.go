package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// cgroupProcs counts the pids of cgroup.procs, one a line, however the
// reads split them.
func TestCgroupProcs(t *testing.T) {
	var many strings.Builder
	for i := range 2000 { // about 14 KiB: pids split across reads
		many.WriteString(strconv.Itoa(100000+i) + "\n")
	}
	for _, tc := range []struct {
		content string
		want    int
	}{
		{"", 0},
		{"\n", 0},
		{"12\n", 1},
		{"12\n345\n6789\n", 3},
		{many.String(), 2000},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := cgroupProcs(dir); err != nil || got != tc.want {
			t.Errorf("cgroupProcs of %d bytes = %d, %v; want %d", len(tc.content), got, err, tc.want)
		}
	}
	if _, err := cgroupProcs(filepath.Join(t.TempDir(), "gone")); err == nil {
		t.Error("cgroupProcs of a cgroup that is gone: no error")
	}
}
