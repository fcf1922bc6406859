package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// jsonErrorArgs are arguments that each command accepts: with the tree's
// lock held they fail (busy, or a refusal for those that do not wait).
var jsonErrorArgs = map[string][]string{
	"init": {}, "add": {"--id", "t9"}, "claim": {}, "heartbeat": {"t1", "--token", "5"},
	"verify": {"t1", "--token", "5"}, "complete": {"t1", "--token", "5"}, "release": {"t1", "--token", "5"},
	"fail": {"t1", "--token", "5"}, "reap": {}, "revoke": {"t1"}, "cancel": {"t1"}, "requeue": {"t1"}, "set": {"t1", "--priority", "1"}, "defaults": {"--ttl", "1m"}, "status": {},
	"show": {"t1"}, "list": {}, "log": {}, "replay": {"--check"}, "recover": {}, "compact": {}, "run": {"--", "true"},
	"put": {"t1", "n1", "--token", "5"}, "guide": {},
	"mcp": {}, "serve": {"--http", "127.0.0.1:0"}, "daemon": {"--idle", "0s"}, // a daemon serves any tree: refused for its --idle
}

// TestJSON_EveryCommandErrorIsOneObject (issue 9, item 19): with --json,
// every command's error is exactly one JSON object on stderr and nothing
// else there, nor on stdout: a usage error, and a failure while a notice
// (the world-writable tree warning) is pending, which travels inside the
// error object.
func TestJSON_EveryCommandErrorIsOneObject(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	for _, args := range [][]string{{"init"}, {"add", "--id", "t1"}} {
		if code, _, stderr := runCLI(append([]string{"--dir", tree}, args...)...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
	}
	if err := os.Chmod(tree, 0o777); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(tree, ".fence", "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	for _, c := range newApp(&output{}, nil).Commands {
		if c.Name == helpCommandName {
			continue
		}
		args, ok := jsonErrorArgs[c.Name]
		if !ok {
			t.Errorf("command %q has no entry in jsonErrorArgs", c.Name)
			continue
		}
		cases := [][]string{
			append([]string{c.Name, "--no-such-flag"}, args...),
			append([]string{c.Name, "--timeout", "50ms"}, args...),
		}
		for _, a := range cases {
			code, stdout, stderr := runCLI(append([]string{"--dir", tree, "--json"}, a...)...)
			if code == 0 {
				t.Errorf("%v: exit 0, want an error", a)
				continue
			}
			if stdout != "" {
				t.Errorf("%v: stdout %q, want nothing", a, stdout)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "}\n") {
				t.Errorf("%v: stderr is not exactly one line holding one object: %q", a, stderr)
				continue
			}
			var obj struct {
				Code    *int             `json:"code"`
				Reason  string           `json:"reason"`
				Message string           `json:"message"`
				Notices []map[string]any `json:"notices"`
			}
			var raw map[string]any
			if err := json.Unmarshal([]byte(stderr), &raw); err != nil {
				t.Errorf("%v: stderr is not JSON: %v: %q", a, err, stderr)
				continue
			}
			if err := json.Unmarshal([]byte(stderr), &obj); err != nil || obj.Code == nil || *obj.Code != code || obj.Reason == "" || obj.Message == "" {
				t.Errorf("%v: exit %d, error object %q lacks code (= exit), reason or message", a, code, stderr)
			}
			if code == exitBusy && len(obj.Notices) == 0 && c.Name != "init" && c.Name != "recover" {
				t.Errorf("%v: the pending world-writable notice is not in the error object: %q", a, stderr)
			}
		}
	}
}

// TestJSON_NoticesNeverOnStderr (issue 9, item 19): with --json a notice
// (here the world-writable warning every command gives) is part of the
// result on stdout: a "notices" field of the one result object, or, for
// log's stream of events and list's array, {"notice",…} objects after
// them. stderr stays empty on success.
func TestJSON_NoticesNeverOnStderr(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	for _, args := range [][]string{{"init"}, {"add", "--id", "t1"}, {"add", "--id", "t2"}} {
		if code, _, stderr := runCLI(append([]string{"--dir", tree}, args...)...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
	}
	if err := os.Chmod(tree, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"show", "t1"}, {"list"}, {"log"}, {"claim", "t1"}, {"claim", "t2", "--format", "json"}, {"reap"}, {"replay", "--check"}, {"add", "--id", "t3"}} {
		code, stdout, stderr := runCLI(append([]string{"--dir", tree, "--json"}, args...)...)
		if code != 0 || stderr != "" {
			t.Errorf("%v: exit %d, stderr %q; want 0 and nothing on stderr", args, code, stderr)
		}
		if !strings.Contains(stdout, `"notice":"warning"`) || !strings.Contains(stdout, "world-writable") {
			t.Errorf("%v: the notice is not in the result: %q", args, stdout)
		}
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
			var v any // an object, or list's array
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Errorf("%v: stdout line is not one JSON value: %q", args, line)
			}
		}
	}
}
