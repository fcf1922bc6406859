package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTorture_ReservedIDs (torture suite): every word the CLI parser knows
// (command names, flag names, help, h, version…; see reservedWords) used
// as a task id with every command that takes one, through the real binary
// (see idSteps): each must be read as the id, never as help or a
// subcommand. make test runs a few words; make torture all of them.
func TestTorture_ReservedIDs(t *testing.T) {
	words := reservedWords()
	if !tortureFull() {
		words = []string{"h", "help", "claim", "token", "version"}
	}
	tree := filepath.Join(t.TempDir(), "tree")
	if out, err := fencectlCmd(tree, "init").CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	binary := func(args ...string) (int, string, string) {
		cmd := fencectlCmd(tree, args...)
		cmd.Env = append(cmd.Env, "FENCE_AGENT=reserved")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return exitCode(err), stdout.String(), stderr.String()
	}
	start := time.Now()
	misread := map[string]bool{}
	for _, w := range words {
		for _, err := range checkReservedID(binary, w) {
			misread[w] = true
			t.Errorf("id %q: %v", w, err)
		}
	}
	var bad []string
	for w := range misread {
		bad = append(bad, w)
	}
	metrics := map[string]any{
		"words":          len(words),
		"steps_per_word": len(idSteps()),
		"invocations":    len(words) * len(idSteps()),
		"misread_ids":    len(bad),
		"seconds":        time.Since(start).Seconds(),
	}
	if len(bad) > 0 {
		metrics["misread"] = strings.Join(bad, ",")
	}
	tortureReport(t, "reserved ids", metrics)
}
