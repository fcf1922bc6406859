package fence_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
	"github.com/fencectl/fencectl/journal/record"
)

// TestInvalidInput_FieldsNotFlags (issue 10): a refused input says which
// input, which rule and which value as fields, and its message is the
// domain's: no flag names, no fencectl commands. The CLI words it.
func TestInvalidInput_FieldsNotFlags(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	root := t.TempDir()
	cases := []struct {
		name  string
		call  func() error
		input fence.Input
		rule  fence.Rule
		value any
	}{
		{"duplicate id", func() error {
			_, err := tree.Add(bg, fence.AddRequest{ID: "t1"})
			return err
		}, fence.InputID, fence.RuleExists, "t1"},
		{"bad id", func() error {
			_, err := tree.Add(bg, fence.AddRequest{ID: "a/b"})
			return err
		}, fence.InputID, fence.RuleFormat, "a/b"},
		{"negative max attempts", func() error {
			_, err := tree.Add(bg, fence.AddRequest{ID: "t2", MaxAttempts: -1})
			return err
		}, fence.InputMaxAttempts, fence.RuleRange, -1},
		{"ttl over the bound", func() error {
			_, err := tree.Claim(bg, fence.ClaimRequest{TTL: fence.MaxTTL + 1})
			return err
		}, fence.InputTTL, fence.RuleRange, fence.MaxTTL + 1},
		{"negative wait", func() error {
			_, err := tree.Claim(bg, fence.ClaimRequest{Wait: -time.Second})
			return err
		}, fence.InputWait, fence.RuleRange, -time.Second},
		{"bad request id", func() error {
			_, err := tree.Claim(bg, fence.ClaimRequest{RequestID: "a b"})
			return err
		}, fence.InputRequestID, fence.RuleFormat, "a b"},
		{"missing token", func() error {
			_, err := tree.Heartbeat(bg, fence.FencedRequest{ID: "t1"})
			return err
		}, fence.InputToken, fence.RuleMissing, nil},
		{"negative limit", func() error {
			_, err := tree.Log(bg, fence.LogFilter{Limit: -1})
			return err
		}, fence.InputLimit, fence.RuleRange, -1},
		{"init with zero attempts", func() error {
			_, err := fence.InitTree(filepath.Join(root, "a"), record.Defaults{TTL: time.Minute}, fence.Options{Timeout: time.Second})
			return err
		}, fence.InputMaxAttempts, fence.RuleRange, 0},
		{"recover with a zero lease", func() error {
			// Recover validates its settings as init does: it used to
			// write a journal whose leases last 0.
			_, err := fence.Recover(tree.Root(), record.Defaults{MaxAttempts: 1}, fence.Options{Timeout: time.Second})
			return err
		}, fence.InputTTL, fence.RuleRange, time.Duration(0)},
		{"recover of nothing", func() error {
			_, err := fence.Recover(filepath.Join(root, "none"), record.Defaults{TTL: time.Minute, MaxAttempts: 1}, fence.Options{Timeout: time.Second})
			return err
		}, fence.InputRoot, fence.RuleNoTree, filepath.Join(root, "none")},
	}
	for _, c := range cases {
		err := c.call()
		var ie *fence.InvalidInputError
		if !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want *InvalidInputError", c.name, err)
			continue
		}
		if ie.Input != c.input || ie.Rule != c.rule || ie.Value != c.value {
			t.Errorf("%s: input %q rule %q value %#v, want %q %q %#v", c.name, ie.Input, ie.Rule, ie.Value, c.input, c.rule, c.value)
		}
		if msg := err.Error(); strings.Contains(msg, "--") || strings.Contains(msg, "fencectl") {
			t.Errorf("%s: %q speaks CLI", c.name, msg)
		}
	}
}

// TestTaskFileError_ProblemNotCommands (issue 10): a refusal over a task's
// file says which problem as a field; the fencectl command that helps is
// the CLI's to add, not part of the domain's message.
func TestTaskFileError_ProblemNotCommands(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	file := tree.Path("t1", record.Available)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", file); err != nil {
		t.Fatal(err)
	}
	_, err := tree.Claim(bg, fence.ClaimRequest{ID: "t1", Agent: "a"})
	var fe *fence.TaskFileError
	if !errors.As(err, &fe) || fe.Problem != fence.FileNotRegular {
		t.Fatalf("claim of a symlinked task file = %v, want a TaskFileError of FileNotRegular", err)
	}
	if strings.Contains(err.Error(), "fencectl ") {
		t.Errorf("the domain's message names a fencectl command: %s", err)
	}
	// Put the file back, so the tree passes the invariant check at cleanup.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A refusal encoded as JSON (a program that hands it on to its agents)
// never carries the live token: an agent told it retried with it and
// completed another agent's task (found from outside).
func TestStaleTokenError_JSONCarriesNoLiveToken(t *testing.T) {
	e := &fence.StaleTokenError{Reason: fence.ReasonNotHeld, Task: "t1", Yours: 7, Current: 123456789, Holder: "a"}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "123456789") {
		t.Fatalf("the refusal's JSON names the live token: %s", b)
	}
}

// The library keeps the journal's texts as the CLI does: an agent name
// or a reason with control characters, bytes that are not UTF-8, or
// beyond its bound is refused as invalid input, by every entry point, and
// nothing changes (found from outside: the library stored them, and `log
// --json` gave back another name).
func TestTexts_RefusedByTheLibrary(t *testing.T) {
	tree := newTree(t)
	add(t, tree, "t1", 0)
	good := claim(t, tree, "t1", "a")
	for _, bad := range []struct{ agent, reason string }{
		{"a\x1b[31m", ""}, {"a\xff", ""}, {strings.Repeat("a", fence.MaxAgentLen+1), ""},
		{"a", "line\nbreak"}, {"a", strings.Repeat("r", fence.MaxReasonLen+1)},
	} {
		calls := map[string]func() error{
			"release": func() error {
				_, err := tree.Release(bg, fence.FencedRequest{ID: "t1", Token: good.Token, Agent: bad.agent, Reason: bad.reason})
				return err
			},
			"revoke": func() error { _, err := tree.Revoke(bg, "t1", bad.agent, bad.reason); return err },
		}
		if bad.reason == "" {
			calls["claim"] = func() error { _, err := tree.Claim(bg, fence.ClaimRequest{Agent: bad.agent}); return err }
			calls["batch"] = func() error {
				_, err := tree.ClaimBatch(bg, fence.BatchClaimRequest{Agent: bad.agent, Count: 1})
				return err
			}
		}
		for name, call := range calls {
			var invalid *fence.InvalidInputError
			if err := call(); !errors.As(err, &invalid) {
				t.Fatalf("%s with agent %q, reason %q: %v, want invalid input", name, bad.agent, truncateForTest(bad.reason), err)
			}
		}
	}
	if v, err := tree.Show(bg, "t1"); err != nil || v.Task.State != record.Claimed || v.Task.Lease.Token != good.Token {
		t.Fatalf("t1 after the refusals: %+v, %v; want still claimed by the first claim", v.Task, err)
	}
}

func truncateForTest(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}
