package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdopt_ManyAtOnce drops more files into inbox/ than one etcd
// transaction takes (etcd's --max-txn-ops, 128 by default) and checks that
// one writer adopts them all, on every backend: the adoption is split
// until each commit fits, instead of failing, putting the files back and
// failing again at every later writer.
func TestAdopt_ManyAtOnce(t *testing.T) {
	const tasks = 300
	for _, b := range scriptBackends {
		if b.front {
			continue // reap and status: the front hands them on, to what bolt runs
		}
		t.Run(b.name, func(t *testing.T) {
			env := b.start(t)()
			dir := filepath.Join(t.TempDir(), "tree")
			run := func(args ...string) string {
				c := fencectlCmd(dir, args...)
				for k, v := range env {
					c.Env = append(c.Env, k+"="+v)
				}
				out, err := c.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			run("init")
			for i := 0; i < tasks; i++ {
				if err := os.WriteFile(filepath.Join(dir, "inbox", fmt.Sprintf("t%04d", i)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if out := run("reap"); strings.Contains(out, "not committed") {
				t.Errorf("reap adopting %d files warned:\n%s", tasks, out)
			}
			var st struct {
				Counts map[string]int `json:"counts"`
			}
			if out := run("status", "--json"); json.Unmarshal([]byte(out), &st) != nil || st.Counts["available"] != tasks {
				t.Fatalf("after adopting %d files, status says %s", tasks, out)
			}
			for sub, want := range map[string]int{"inbox": 0, "available": tasks} {
				if entries, _ := os.ReadDir(filepath.Join(dir, sub)); len(entries) != want {
					t.Errorf("%s/ holds %d files, want %d", sub, len(entries), want)
				}
			}
		})
	}
}
