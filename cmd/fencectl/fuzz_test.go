package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// Fuzz targets of the torture suite (part 4) for the command line: flag
// values and argument order, through the whole CLI in-process (run()).

// fuzzFlagKind is how a flag's value is parsed, to tell a bad value (which
// must give exit 2) from a good one.
type fuzzFlagKind int

const (
	kDuration fuzzFlagKind = iota
	kUint64
	kInt64
	kInt
	kSince
	kString
)

// fuzzFlag is one value-taking flag of a command: its name, a valid value
// used when the fuzz input targets another flag, and how it parses.
type fuzzFlag struct {
	name, good string
	kind       fuzzFlagKind
}

// fuzzCmd is a command line FuzzParseFlags builds: positional arguments and
// value flags.
type fuzzCmd struct {
	name       string
	positional []string
	flags      []fuzzFlag
}

// fuzzTokenPlaceholder is replaced by the token of the setup claim.
const fuzzTokenPlaceholder = "<token>"

var fuzzCmds = []fuzzCmd{
	{"claim", nil, []fuzzFlag{{"ttl", "1m", kDuration}, {"wait", "0s", kDuration}, {"agent", "fz", kString}}},
	{"claim", []string{"t2"}, []fuzzFlag{{"ttl", "1m", kDuration}, {"wait", "0s", kDuration}, {"token", fuzzTokenPlaceholder, kUint64}}},
	{"heartbeat", []string{"t1"}, []fuzzFlag{{"token", fuzzTokenPlaceholder, kUint64}, {"ttl", "1m", kDuration}}},
	{"verify", []string{"t1"}, []fuzzFlag{{"token", fuzzTokenPlaceholder, kUint64}}},
	{"complete", []string{"t3"}, []fuzzFlag{{"token", "12345", kUint64}}},
	{"release", []string{"t3"}, []fuzzFlag{{"token", "12345", kUint64}, {"reason", "r", kString}}},
	{"fail", []string{"t3"}, []fuzzFlag{{"token", "12345", kUint64}, {"reason", "r", kString}}},
	{"add", nil, []fuzzFlag{{"priority", "0", kInt64}, {"max-attempts", "3", kInt}, {"id", "", kString}}},
	{"log", nil, []fuzzFlag{{"limit", "5", kInt}, {"since", "1h", kSince}, {"task", "t1", kString}}},
	{"status", nil, nil},
	{"reap", nil, nil},
	{"init", nil, []fuzzFlag{{"ttl", "10m", kDuration}, {"max-attempts", "3", kInt}}},
}

// badValue reports whether v cannot be parsed as a value of kind, the way
// the flag package (and parseSince) parse it.
func badValue(kind fuzzFlagKind, v string) bool {
	var err error
	switch kind {
	case kDuration:
		_, err = time.ParseDuration(v)
	case kUint64: // decimal, in its own form: no "+", no leading zeros
		var n uint64
		n, err = strconv.ParseUint(v, 10, 64)
		if err == nil && strconv.FormatUint(n, 10) != v {
			return true
		}
	case kInt64, kInt:
		var n int64
		n, err = strconv.ParseInt(v, 10, 64)
		if err == nil && strconv.FormatInt(n, 10) != v {
			return true
		}
	case kSince:
		if v == "" {
			return false // empty: no --since filter
		}
		if _, terr := time.Parse(time.RFC3339Nano, v); terr == nil {
			return false
		}
		d, derr := time.ParseDuration(v)
		return derr != nil || d < 0
	}
	return err != nil
}

// splitmix is a tiny deterministic PRNG for shuffling by a fuzz seed.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// fuzzRun is run() with a deadline, so that a --wait or --timeout the fuzzer
// makes long cannot stall it.
func fuzzRun(args []string) (int, string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var stdout, stderr strings.Builder
	code := run(ctx, append([]string{"fencectl"}, args...), strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// checkExit checks what every invocation must give: a documented exit
// code, no Go panic turned into "internal error", and with --json on a
// failure exactly one JSON object on stderr with that code and a reason.
func checkExit(t *testing.T, args []string, code int, stderr string, jsonOut bool, value string) {
	t.Helper()
	if !(code >= 0 && code <= 7) && code != 127 {
		t.Fatalf("%q: exit %d is not a documented code\nstderr: %s", args, code, stderr)
	}
	if (strings.Contains(stderr, "internal error") && !strings.Contains(value, "internal error")) ||
		(strings.Contains(stderr, "goroutine ") && !strings.Contains(value, "goroutine ")) {
		t.Fatalf("%q: a panic reached the user (exit %d):\n%s", args, code, stderr)
	}
	if !jsonOut || code == 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("%q: exit %d with --json: stderr holds %d lines, want one JSON object:\n%s", args, code, len(lines), stderr)
	}
	var obj struct {
		Code   *int   `json:"code"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &obj); err != nil {
		t.Fatalf("%q: exit %d with --json: stderr is not one JSON object: %v\n%s", args, code, err, stderr)
	}
	if obj.Code == nil || *obj.Code != code || obj.Reason == "" {
		t.Fatalf("%q: exit %d but the JSON error says %s", args, code, stderr)
	}
}

// jsonGiven reports whether --json was asked for: a --json argument before
// any "--" (after "--" everything is a positional argument).
func jsonGiven(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// FuzzParseFlags builds a command line for one of fuzzCmds on a real tree,
// puts the fuzzed value into one of its value flags (--ttl, --wait,
// --timeout, --token, --priority, --max-attempts, --limit, --since, ...),
// shuffles the order of its arguments by a fuzz seed, and checks:
//
//   - reorderArgs never panics and never loses or reorders a positional
//     argument, and keeps each flag next to its value;
//   - run() never panics (no "internal error"), exits with a documented
//     code (0..7 or 127);
//   - a value that does not parse gives exit 2, and under --json exactly
//     one JSON object on stderr with code 2 and reason invalid_input.
func FuzzParseFlags(f *testing.F) {
	for i := range fuzzCmds {
		f.Add(uint8(i), uint8(0), "1m", uint64(0), false, true)
	}
	for _, v := range []string{"", "-1s", "0", "-0", "1e9h", "9223372036854775807ns", "9223372036854775808ns",
		"2562047h47m16.854775807s", "87601h", "1.5h", "0x10", "-0x8000000000000000", "18446744073709551616",
		"1_000", "∞", "NaN", "--", "-", "--json", "t1", "2026-11-21T09:00:00Z", "0001-01-01T00:00:00Z",
		"99999-01-01T00:00:00Z", "1h\x00", " 1m", "1m ", strings.Repeat("9", 400), "\xff", "=", "--ttl=1m"} {
		for _, c := range []uint8{0, 1, 2, 7, 8, 11} {
			f.Add(c, uint8(0), v, uint64(len(v)), true, c%2 == 0)
			f.Add(c, uint8(1), v, uint64(c)*7919, false, true)
		}
		f.Add(uint8(200), uint8(0), v, uint64(3), true, true) // --timeout
	}

	root := filepath.Join(f.TempDir(), "tree")
	if code, _, stderr := runCLI("--dir", root, "init", "--ttl", "1h"); code != 0 {
		f.Fatalf("init: %d %s", code, stderr)
	}
	for _, id := range []string{"t1", "t2", "t3"} {
		if code, _, stderr := runCLI("--dir", root, "add", "--id", id); code != 0 {
			f.Fatalf("add %s: %d %s", id, code, stderr)
		}
	}
	code, stdout, stderr := runCLI("--dir", root, "claim", "t1", "--ttl", "87000h", "--json", "--agent", "setup")
	if code != 0 {
		f.Fatalf("claim: %d %s", code, stderr)
	}
	var claimed struct{ Token uint64 }
	if err := json.Unmarshal([]byte(stdout), &claimed); err != nil {
		f.Fatal(err)
	}
	token := strconv.FormatUint(claimed.Token, 10)
	app := newApp(&output{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}, nil)

	f.Fuzz(func(t *testing.T, which, flagIdx uint8, value string, order uint64, eqForm, jsonOut bool) {
		// which >= len(fuzzCmds) fuzzes the global --timeout on status.
		cmd := fuzzCmd{name: "status"}
		target := fuzzFlag{"timeout", "10s", kDuration}
		if int(which) < len(fuzzCmds) {
			cmd = fuzzCmds[which]
			if len(cmd.flags) > 0 {
				target = cmd.flags[int(flagIdx)%len(cmd.flags)]
			}
		}

		// Units: a flag and its value stay together; positionals alone.
		type unit struct {
			toks   []string
			global bool
		}
		pair := func(name, v string) []string {
			if eqForm {
				return []string{"--" + name + "=" + v}
			}
			return []string{"--" + name, v}
		}
		var units []unit
		for _, fl := range cmd.flags {
			v := fl.good
			if fl.name == target.name {
				v = value
			}
			if v == fuzzTokenPlaceholder {
				v = token
			}
			if fl.name == "id" && v == "" {
				continue // add picks a fresh ULID
			}
			units = append(units, unit{toks: pair(fl.name, v)})
		}
		globals := []unit{{toks: []string{"--dir", root}, global: true}}
		if target.name == "timeout" {
			globals = append(globals, unit{toks: pair("timeout", value), global: true})
		}
		if jsonOut {
			globals = append(globals, unit{toks: []string{"--json"}, global: true})
		}
		rng := splitmix(order)
		// Global flags go before or after the command name, by the seed.
		var before []string
		for _, g := range globals {
			if rng.next()%2 == 0 {
				before = append(before, g.toks...)
			} else {
				units = append(units, g)
			}
		}
		for _, p := range cmd.positional {
			units = append(units, unit{toks: []string{p}})
		}
		for i := len(units) - 1; i > 0; i-- {
			j := int(rng.next() % uint64(i+1))
			units[i], units[j] = units[j], units[i]
		}
		args := append(append([]string{}, before...), cmd.name)
		for _, u := range units {
			args = append(args, u.toks...)
		}

		// reorderArgs alone.
		out, rerr := reorderArgs(app, append([]string{"fencectl"}, args...))
		if rerr != nil {
			var ue *usageError
			if !errors.As(rerr, &ue) {
				t.Fatalf("reorderArgs(%q) error %T %v, want a usage error", args, rerr, rerr)
			}
			if !strings.Contains(rerr.Error(), "needs a value") {
				t.Fatalf("reorderArgs(%q): unexpected error %v", args, rerr)
			}
		} else {
			checkReordered(t, args, out, cmd.positional)
		}

		code, _, stderr := fuzzRun(args)
		checkExit(t, args, code, stderr, jsonGiven(args), value)
		if badValue(target.kind, value) && code != exitUsage {
			t.Fatalf("%q: --%s %q does not parse, but exit %d (want 2)\nstderr: %s", args, target.name, value, code, stderr)
		}
		if code == exitUsage && jsonGiven(args) && !strings.Contains(stderr, `"reason":"invalid_input"`) {
			t.Fatalf("%q: exit 2 without reason invalid_input: %s", args, stderr)
		}
	})
}

// checkReordered checks reorderArgs' output for a command line built by
// FuzzParseFlags: the positionals come last, after the "--" it inserts, in
// their original order, and every "--flag value" pair is still adjacent.
func checkReordered(t *testing.T, in, out []string, positional []string) {
	t.Helper()
	out = out[1:] // "fencectl"
	if len(positional) > 0 {
		tail := out[len(out)-len(positional):]
		if !slices.Equal(tail, positional) {
			t.Fatalf("reorderArgs(%q) = %q: positionals %q not last and in order", in, out, positional)
		}
		if out[len(out)-len(positional)-1] != "--" {
			t.Fatalf("reorderArgs(%q) = %q: no \"--\" before the positionals", in, out)
		}
	}
	for i := 0; i < len(in)-1; i++ {
		a := in[i]
		if !strings.HasPrefix(a, "--") || strings.Contains(a, "=") || a == "--json" {
			continue
		}
		found := false
		for j := 0; j+1 < len(out); j++ {
			if out[j] == a && out[j+1] == in[i+1] {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("reorderArgs(%q) = %q: %s lost its value %q", in, out, a, in[i+1])
		}
		i++
	}
	if len(out) != len(in) && len(out) != len(in)+1 {
		t.Fatalf("reorderArgs(%q) = %q: %d arguments became %d", in, out, len(in), len(out))
	}
}

// FuzzReorderArgs gives reorderArgs arbitrary argument lists (the fuzz
// string split on NUL, which no real argument holds) and checks that it
// never panics, that an error is always the "needs a value" usage error,
// and that on success it loses nothing: the output holds the same
// arguments (plus at most one "--" it adds), every positional argument of
// the command comes last in its original order, and a line without a
// known command is left as it is.
func FuzzReorderArgs(f *testing.F) {
	for _, s := range []string{
		"claim\x00t1\x00--agent\x00a",
		"claim\x00t1\x00--agent",
		"--json\x00claim\x00--dir\x00x\x00t1",
		"run\x00--agent\x00a\x00t1\x00--\x00sh\x00-c\x00--agent b",
		"complete\x00--token=5\x00t1\x00--reason\x00--\x00x",
		"--dir\x00--json\x00status",
		"--timeout",
		"nosuchcmd\x00--agent\x00a",
		"claim\x00-\x00--\x00--",
		"add\x00--id\x00-x\x00-",
		"claim\x00--ttl\x00-1m\x00t1\x00t2",
		"log\x00--limit\x00--since\x001h",
		"\x00\x00claim",
		"claim\x00--help\x00t1\x00-h",
		"heartbeat\x00--json=true\x00t1\x00--token\x005\x00--ttl=1m",
	} {
		f.Add(s)
	}
	app := newApp(&output{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}, nil)
	globals := arityOf(app.Flags)
	f.Fuzz(func(t *testing.T, raw string) {
		in := append([]string{"fencectl"}, strings.Split(raw, "\x00")...)
		if raw == "" {
			in = in[:1]
		}
		out, err := reorderArgs(app, slices.Clone(in))
		if err != nil {
			var ue *usageError
			if !errors.As(err, &ue) || !(strings.Contains(err.Error(), "needs a value") || strings.Contains(err.Error(), "use true or false")) {
				t.Fatalf("reorderArgs(%q): unexpected error %T %v", in, err, err)
			}
			return
		}
		if len(out) == 0 || out[0] != "fencectl" {
			t.Fatalf("reorderArgs(%q) = %q: program name lost", in, out)
		}

		// Find the command as the CLI does: skip global flags (and their
		// values) before it.
		i := 1
		for i < len(in) && isFlagArg(in[i]) {
			if takes(globals, in[i]) && i+1 < len(in) {
				i++
			}
			i++
		}
		var cmd *cli.Command
		if i < len(in) {
			cmd = app.Command(in[i])
		}
		if cmd == nil {
			if !slices.Equal(in, out) {
				t.Fatalf("reorderArgs(%q) = %q: changed a line without a known command", in, out)
			}
			return
		}

		// -h or --help among the flags (before any "--") is `help CMD`,
		// whatever else is there: never a word among the positionals.
		rest := in[i+1:]
		help := false
		for j := 0; j < len(rest) && rest[j] != "--"; j++ {
			if b := flagBase(rest[j]); isFlagArg(rest[j]) && (b == "help" || b == "h") {
				_, v, hasValue := strings.Cut(rest[j], "=")
				on, _ := strconv.ParseBool(v) // a bad value was an error above
				help = help || !hasValue || on
				continue
			}
			if isFlagArg(rest[j]) && takes(arityOfCmd(cmd, globals, rest[j]), rest[j]) {
				j++
			}
		}
		if help {
			if !slices.Equal(out, []string{"fencectl", "help", cmd.Name}) {
				t.Fatalf("reorderArgs(%q) = %q: a help flag must become `help %s`", in, out, cmd.Name)
			}
			return
		}

		// Same arguments: out == in, the command name in canonical form,
		// without help flags (=false ones) and, for every command but run,
		// without the user's own "--" (it only ends the flags), plus at
		// most one added "--".
		want := slices.Clone(in)
		want[i] = cmd.Name
		keep := want[:i+1]
		sawDash, isValue := false, false
		for j, a := range want[i+1:] {
			// A help flag is dropped, but not a word that is the value of
			// the flag before it (`log --since -h`).
			wasValue := isValue
			isValue = !sawDash && !wasValue && isFlagArg(a) && takes(arityOfCmd(cmd, globals, a), a)
			if wasValue {
				keep = append(keep, a)
				continue
			}
			if a == "--" && !sawDash {
				sawDash = true
				if !takesCommandLine[cmd.Name] {
					keep = append(keep, want[i+1+j+1:]...)
					break
				}
			}
			if !sawDash && isFlagArg(a) && (flagBase(a) == "help" || flagBase(a) == "h") {
				continue
			}
			if sawDash {
				keep = append(keep, want[i+1+j:]...)
				break
			}
			keep = append(keep, a)
		}
		want = keep
		got := slices.Clone(out)
		slices.Sort(want)
		slices.Sort(got)
		if len(got) == len(want)+1 {
			k := slices.Index(got, "--")
			if k < 0 {
				t.Fatalf("reorderArgs(%q) = %q: an argument was added", in, out)
			}
			got = slices.Delete(got, k, k+1)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("reorderArgs(%q) = %q: arguments lost or changed", in, out)
		}

		// The positionals, found independently: after the command, every
		// argument that is not a flag and not the value of the flag before
		// it; everything from a "--" on.
		local := arityOf(cmd.Flags)
		var pos []string
		for j := 0; j < len(rest); j++ {
			a := rest[j]
			if a == "--" {
				if takesCommandLine[cmd.Name] {
					pos = append(pos, rest[j:]...)
				} else {
					pos = append(pos, rest[j+1:]...)
				}
				break
			}
			if !isFlagArg(a) {
				pos = append(pos, a)
				continue
			}
			name := flagBase(a)
			ar := local
			if _, ok := local[name]; !ok {
				if _, ok := globals[name]; ok {
					ar = globals
				}
			}
			if takes(ar, a) {
				j++
			}
		}
		if len(pos) == 0 {
			return
		}
		if len(out) < len(pos)+1 || !slices.Equal(out[len(out)-len(pos):], pos) || out[len(out)-len(pos)-1] != "--" {
			t.Fatalf("reorderArgs(%q) = %q: positionals %q are not last, in order, after \"--\"", in, out, pos)
		}
	})
}

// arityOfCmd is the arity map that applies to flag a of cmd: its own, or
// the global one for a global flag given after the command.
func arityOfCmd(cmd *cli.Command, globals map[string]bool, a string) map[string]bool {
	local := arityOf(cmd.Flags)
	if _, ok := local[flagBase(a)]; !ok {
		if _, ok := globals[flagBase(a)]; ok {
			return globals
		}
	}
	return local
}

// arityOf maps each flag name to whether it takes a value (an independent
// spelling of the rule: every flag but a bool one takes a value).
func arityOf(flags []cli.Flag) map[string]bool {
	m := map[string]bool{"help": false, "h": false}
	for _, f := range flags {
		_, isBool := plainFlag(f).(*cli.BoolFlag)
		for _, n := range f.Names() {
			m[n] = !isBool
		}
	}
	return m
}

func isFlagArg(a string) bool { return len(a) > 1 && a[0] == '-' }

func flagBase(a string) string {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	return name
}

func takes(arity map[string]bool, a string) bool {
	return !strings.Contains(a, "=") && arity[flagBase(a)]
}
