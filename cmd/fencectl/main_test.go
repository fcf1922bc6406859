package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

// TestMain lets the test binary act as fencectl: testscript puts it on the
// scripts' PATH under that name, and the race test runs it with
// FENCECTL_AS_MAIN=1. Either way the real main runs in a real process.
func TestMain(m *testing.M) {
	if os.Getenv("FENCECTL_AS_MAIN") == "1" {
		main()
		return
	}
	if name := os.Getenv("FENCECTL_IMPOSTOR"); name != "" {
		impostor(name) // daemon_test.go
		return
	}
	testscript.Main(m, map[string]func(){"fencectl": main})
}

// TestScripts runs every testdata/script/*.txtar against the real binary,
// once per journal backend (scriptBackends): the same commands, exit codes
// and JSON on each. A script that needs the test hooks (the settable
// clock, crash points, rename faults) opens with `[!fencetest] skip`: the
// condition holds when this binary was built with -tags fencetest, as make
// test builds it. [bolt] and [etcd] say which backend a script runs on,
// for the parts that differ (a journal file, leases on etcd's clock).
func TestScripts(t *testing.T) {
	for _, b := range scriptBackends {
		t.Run(b.name, func(t *testing.T) {
			env := b.start(t)
			front := ""
			if b.front {
				front = frontDir(t)
			}
			testscript.Run(t, testscript.Params{
				Dir:                 filepath.Join("testdata", "script"),
				RequireExplicitExec: true,
				Condition: func(cond string) (bool, error) {
					switch cond {
					case "fencetest":
						return testClock != nil, nil // the fencetest build: crash points and the settable clock
					case "bolt", "etcd":
						return cond == b.journal, nil
					case "front":
						return b.front, nil
					case "root":
						return os.Geteuid() == 0, nil
					}
					return false, fmt.Errorf("unknown condition %q", cond)
				},
				Setup: func(e *testscript.Env) error {
					e.Setenv("FENCE_DIR", filepath.Join(e.WorkDir, "tree"))
					e.Setenv("FENCE_AGENT", "agent-test")
					e.Setenv("FENCE_TIMEOUT", "10s")
					for k, v := range env() {
						e.Setenv(k, v)
					}
					if front != "" {
						// Ahead of testscript's own fencectl (this binary).
						e.Setenv("PATH", front+string(os.PathListSeparator)+e.Getenv("PATH"))
					}
					return nil
				},
				Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
					"getjson":       cmdGetJSON,
					"count":         cmdCount,
					"mkfifo":        cmdMkfifo,
					"holdlock":      cmdHoldLock,
					"setschema":     cmdSetSchema,
					"legacyblocked": cmdLegacyBlocked,
					"etcdwipe":      cmdEtcdWipe,
					"etcdexpire":    cmdEtcdExpire,
					"waitfile":      cmdWaitFile,
					"httpget":       cmdHTTPGet,
					"httpstream":    cmdHTTPStream,
					"waitfor":       cmdWaitFor,
					"journalsum":    cmdJournalSum,
				},
			})
		})
	}
}

// getjson VAR PATH [FILE]: parse the last line of stdout (or FILE) as
// JSON, walk the dot-separated PATH and set $VAR to the value found.
func cmdGetJSON(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: getjson VAR PATH [stdout|stderr|FILE]")
	}
	src := "stdout"
	if len(args) == 3 {
		src = args[2]
	}
	text := strings.TrimSpace(ts.ReadFile(src))
	lines := strings.Split(text, "\n")
	var v any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		ts.Fatalf("getjson: %s is not JSON: %v\n%s", src, err, text)
	}
	for _, key := range strings.Split(args[1], ".") {
		switch cur := v.(type) {
		case map[string]any:
			val, ok := cur[key]
			if !ok {
				ts.Fatalf("getjson: no key %q in %s", key, args[1])
			}
			v = val
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= len(cur) {
				ts.Fatalf("getjson: bad index %q in %s", key, args[1])
			}
			v = cur[i]
		default:
			ts.Fatalf("getjson: %s: cannot index %T with %q", args[1], v, key)
		}
	}
	switch x := v.(type) {
	case float64:
		ts.Setenv(args[0], strconv.FormatFloat(x, 'f', -1, 64))
	case string:
		ts.Setenv(args[0], x)
	default:
		b, _ := json.Marshal(x)
		ts.Setenv(args[0], string(b))
	}
}

// count DIR N: DIR (relative to $FENCE_DIR) holds exactly N entries.
func cmdCount(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: count DIR N")
	}
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	entries, err := os.ReadDir(filepath.Join(ts.Getenv("FENCE_DIR"), args[0]))
	ts.Check(err)
	if got := len(entries); (got == want) == neg {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		ts.Fatalf("%s holds %d entries %v, want %s%d", args[0], got, names, map[bool]string{true: "not ", false: ""}[neg], want)
	}
}

// mkfifo PATH makes a named pipe.
func cmdMkfifo(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: mkfifo PATH")
	}
	ts.Check(unix.Mkfifo(ts.MkAbs(args[0]), 0o644))
}

// holdlock: take the tree's lock exclusively for the rest of the script,
// as a stuck process would.
func cmdHoldLock(ts *testscript.TestScript, neg bool, args []string) {
	path := filepath.Join(ts.Getenv("FENCE_DIR"), ".fence", "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	ts.Check(err)
	ts.Check(unix.Flock(int(f.Fd()), unix.LOCK_EX))
	ts.Defer(func() { f.Close() })
}

// runCLI runs the CLI in-process and returns its exit code and output;
// used by tests that check argument handling without a subprocess.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr strings.Builder
	code := run(context.Background(), append([]string{"fencectl"}, args...), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}
