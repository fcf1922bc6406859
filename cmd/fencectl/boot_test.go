package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/rogpeppe/go-internal/testscript"
	bolt "go.etcd.io/bbolt"
)

// setschema VERSION: write VERSION as the schema version of the tree's
// journal, as a newer (or other) fencectl would have.
func cmdSetSchema(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: setschema VERSION")
	}
	path := filepath.Join(ts.Getenv("FENCE_DIR"), ".fence", "journal.db")
	b, err := bolt.Open(path, 0o600, nil)
	ts.Check(err)
	err = b.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if meta == nil || meta.Get([]byte("version")) == nil {
			return fmt.Errorf("no meta/version in %s: the test's idea of the layout is out of date", path)
		}
		return meta.Put([]byte("version"), []byte(args[0]))
	})
	ts.Check(err)
	ts.Check(b.Close())
}

// TestInit_RaceProcesses races real init processes on fresh directories,
// round after round, half the time with the same settings and half with
// different ones. Exactly one creates the tree; the others report it
// (exit 0 with the same settings, exit 2 naming the settings that did not
// apply); none fails otherwise; and the tree has the winner's settings.
func TestInit_RaceProcesses(t *testing.T) {
	const rounds, racers = 25, 3
	for round := 0; round < rounds; round++ {
		dir := filepath.Join(t.TempDir(), "tree")
		same := round%2 == 0
		type result struct {
			code           int
			stdout, stderr string
			ttl            string
		}
		results := make([]result, racers)
		var wg sync.WaitGroup
		for i := 0; i < racers; i++ {
			ttl := "1m"
			if !same {
				ttl = fmt.Sprintf("%dm", i+1)
			}
			wg.Add(1)
			go func(i int, ttl string) {
				defer wg.Done()
				cmd := fencectlCmd(dir, "init", "--json", "--ttl", ttl)
				var out, errb bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errb
				err := cmd.Run()
				results[i] = result{clitest.ExitCode(err), out.String(), errb.String(), ttl}
			}(i, ttl)
		}
		wg.Wait()
		winner := ""
		for i, r := range results {
			var res struct {
				Created bool   `json:"created"`
				TTL     string `json:"ttl"`
			}
			switch r.code {
			case 0:
				if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
					t.Fatalf("round %d racer %d: stdout %q: %v", round, i, r.stdout, err)
				}
				if res.Created {
					if winner != "" {
						t.Fatalf("round %d: two inits created the tree", round)
					}
					winner = r.ttl
				}
			case exitUsage:
				if same || !strings.Contains(r.stderr, "did not apply") {
					t.Fatalf("round %d racer %d (--ttl %s): exit 2: %s", round, i, r.ttl, r.stderr)
				}
			default:
				t.Fatalf("round %d racer %d (--ttl %s): exit %d: %s%s", round, i, r.ttl, r.code, r.stdout, r.stderr)
			}
		}
		if winner == "" {
			t.Fatalf("round %d: no init created the tree: %+v", round, results)
		}
		out, err := fencectlCmd(dir, "status", "--json").Output()
		if err != nil {
			t.Fatalf("round %d: status: %v", round, err)
		}
		var st struct {
			TTL string `json:"default_ttl"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimSuffix(winner, "m") + "m0s"; st.TTL != want {
			t.Fatalf("round %d: the tree's lease is %s, but the init that created it asked for %s", round, st.TTL, winner)
		}
		entries, _ := os.ReadDir(filepath.Join(dir, ".fence"))
		for _, e := range entries {
			if strings.Contains(e.Name(), "creating") {
				t.Fatalf("round %d: %s left behind", round, e.Name())
			}
		}
	}
}
