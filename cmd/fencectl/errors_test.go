package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencectl/fencectl/fence"
)

// TestClassify_InvalidInputNamesFlags (issue 10): the domain names an
// input, a rule and a value; the CLI's message names the flag and adds
// the next step, exit 2 with reason invalid_input, also when the error
// comes wrapped.
func TestClassify_InvalidInputNamesFlags(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&fence.InvalidInputError{Input: fence.InputTTL, Rule: fence.RuleRange, Value: -time.Minute, Want: "must be positive"}, "invalid --ttl -1m0s: must be positive"},
		{&fence.InvalidInputError{Input: fence.InputMaxAttempts, Rule: fence.RuleRange, Value: 0, Want: "must be at least 1"}, "invalid --max-attempts 0: must be at least 1"},
		{&fence.InvalidInputError{Input: fence.InputRequestID, Rule: fence.RuleFormat, Value: "a b", Want: "use 1 to 128 of [A-Za-z0-9._:-]"}, `invalid --request-id "a b": use 1 to 128 of [A-Za-z0-9._:-]`},
		{&fence.InvalidInputError{Input: fence.InputToken, Rule: fence.RuleMissing, Want: "show it"}, "missing --token: show it"},
		{&fence.InvalidInputError{Input: fence.InputID, Rule: fence.RuleExists, Value: "t1", Msg: "task t1 already exists"}, "task t1 already exists: choose another --id, or leave --id out for a fresh one"},
		{&fence.InvalidInputError{Input: fence.InputRoot, Rule: fence.RuleNoTree, Msg: "no task tree at /x: nothing to recover"}, "no task tree at /x: nothing to recover (`fencectl init` makes a new tree)"},
		{fmt.Errorf("claim: %w", &fence.InvalidInputError{Input: fence.InputWait, Rule: fence.RuleRange, Value: -time.Second, Want: "must not be negative"}), "claim: invalid --wait -1s: must not be negative"},
		{&fence.InvalidInputError{Input: fence.InputOutputName, Rule: fence.RuleFormat, Value: "a/b", Msg: `invalid output name "a/b": a file name`}, `invalid output name "a/b": a file name`},
		{&fence.InvalidInputError{Input: fence.InputRoot, Rule: fence.RuleNetworkFS, Value: "/n", Msg: "/n is on nfs; nothing created."}, "/n is on nfs; nothing created. For a tree that several hosts share, use `--journal etcd://HOST:PORT/PREFIX`; if only this host ever uses the tree, pass --allow-network-fs"},
	} {
		obj := classify(c.err)
		if obj.Code != exitUsage || obj.Reason != fence.ReasonInvalidInput || obj.Message != c.want {
			t.Errorf("%v: exit %d %s %q, want exit 2 invalid_input %q", c.err, obj.Code, obj.Reason, obj.Message, c.want)
		}
		var in *fence.InvalidInputError
		if errors.As(c.err, &in); obj.Rule != string(in.Rule) {
			t.Errorf("%v: rule %q, want %q", c.err, obj.Rule, in.Rule)
		}
	}
}
