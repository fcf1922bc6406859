package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencectl/fencectl/cmd/fencectl/clitest"
	"github.com/fencectl/fencectl/fence"
)

// jsonTypes is every shape of --json output, by name: what the docs'
// examples and the commands' real output must decode into.
var jsonTypes = map[string]func() any{
	"task":     func() any { return new(taskJSON) },
	"fenced":   func() any { return new(fencedJSON) },
	"show":     func() any { return new(showJSON) },
	"list":     func() any { return new([]taskJSON) }, // an array of tasks, not an object
	"revoke":   func() any { return new(revokeJSON) },
	"cancel":   func() any { return new(cancelJSON) },
	"set":      func() any { return new(setJSON) },
	"defaults": func() any { return new(defaultsJSON) },
	"claim":    func() any { return new(claimJSON) },
	"batch":    func() any { return new(batchJSON) },
	"status":   func() any { return new(statusJSON) },
	"init":     func() any { return new(initJSON) },
	"reap":     func() any { return new(reapJSON) },
	"replay":   func() any { return new(replayJSON) },
	"recover":  func() any { return new(recoverJSON) },
	"compact":  func() any { return new(compactJSON) },
	"event":    func() any { return new(eventJSON) },
	"run":      func() any { return new(runJSON) },
	"error":    func() any { return new(errorObject) },
	"notice":   func() any { return new(noticeJSON) },
	"guide":    func() any { return new(guideJSON) },
}

// decodeStrict decodes one JSON object into a new value of the named type,
// refusing unknown fields and anything after the object, and checks that
// it marshals back to the same bytes: no field lost, none renamed, the
// order kept.
func decodeStrict(kind string, line []byte) error {
	v := jsonTypes[kind]()
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("more after the object")
	}
	var back bytes.Buffer
	enc := json.NewEncoder(&back)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	if got := bytes.TrimSpace(back.Bytes()); !bytes.Equal(got, bytes.TrimSpace(line)) {
		return fmt.Errorf("marshals back as\n%s", got)
	}
	return nil
}

// decodesAs names the types that accept line strictly.
func decodesAs(line []byte) []string {
	var kinds []string
	for kind := range jsonTypes {
		if decodeStrict(kind, line) == nil {
			kinds = append(kinds, kind)
		}
	}
	slices.Sort(kinds)
	return kinds
}

// docExamples returns the JSON examples of README.md and docs/*.md: every
// line of a ```json block, and the output lines (not `$ ` commands) of a
// ```console block that hold an object.
func docExamples(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "..", "README.md"))
	examples := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		block := ""
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "```") && block == "":
				block = strings.TrimPrefix(line, "```")
				if block == "" {
					block = "text"
				}
			case strings.HasPrefix(line, "```"):
				block = ""
			case block == "json" && strings.TrimSpace(line) != "",
				block == "console" && strings.HasPrefix(line, "{"):
				where := fmt.Sprintf("%s:%d", filepath.Base(f), n)
				examples[where] = append(examples[where], line)
			}
		}
	}
	return examples
}

// TestJSON_DocExamples (issue 10): every JSON example in the README and
// docs is an object one of the contract's types accepts as it is: no key
// the type lacks (an undocumented or renamed field), none of another
// type, and the keys in the order the binary prints them.
func TestJSON_DocExamples(t *testing.T) {
	examples := docExamples(t)
	if len(examples) < 2 {
		t.Fatalf("found %d JSON examples in README.md and docs/, want the claim and the error object at least", len(examples))
	}
	for where, lines := range examples {
		for _, line := range lines {
			if kinds := decodesAs([]byte(line)); len(kinds) == 0 {
				var errs []string
				for kind := range jsonTypes {
					errs = append(errs, fmt.Sprintf("  %s: %v", kind, decodeStrict(kind, []byte(line))))
				}
				slices.Sort(errs)
				t.Errorf("%s: the example fits no --json type:\n%s\n%s", where, line, strings.Join(errs, "\n"))
			}
		}
	}
}

// TestJSON_DocExamplesCatchChanges: the check above fails for an example
// with a key no type has, or with a field renamed.
func TestJSON_DocExamplesCatchChanges(t *testing.T) {
	claim := `{"agent":"z","attempts":0,"deadline":"2026-11-22T00:14:22.116478666Z","max_attempts":2,"path":"/tmp/t2/claimed/report-1","priority":0,"renewed":false,"task":"report-1","token":1795305862116478}`
	if got := decodesAs([]byte(claim)); !slices.Equal(got, []string{"claim"}) {
		t.Fatalf("the README's claim decodes as %v, want [claim]", got)
	}
	for _, bad := range []string{
		strings.Replace(claim, `"agent":"z",`, `"agent":"z","color":"red",`, 1),
		strings.Replace(claim, `"renewed"`, `"renewd"`, 1),
		strings.Replace(claim, `"token":1795305862116478`, `"token":"1795305862116478"`, 1),
	} {
		if got := decodesAs([]byte(bad)); len(got) != 0 {
			t.Errorf("%s decodes as %v, want no type", bad, got)
		}
	}
}

// jsonNames lists a type's json keys in the order they are marshalled,
// with those of embedded structs in place.
func jsonNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			names = append(names, jsonNames(f.Type)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		names = append(names, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	return names
}

// TestJSON_FieldOrder: the keys keep the order scripts have always seen.
// The result objects were maps until issue 10, so their fields follow the
// alphabet of their json names; the others keep their own order.
func TestJSON_FieldOrder(t *testing.T) {
	fixed := map[string][]string{
		"notice":  {"notice", "name", "detail"},
		"recover": {"root", "kept_aside", "counts", "freed", "released", "first_token", "findings", "unfinished", "defaults", "notices"},
		"error":   {"code", "reason", "message", "rule", "task", "your_token", "holder", "held_since", "state", "waits_for", "not_before", "attempt", "lost_at", "lost_by", "run", "failed", "notices"},
	}
	types := map[string]reflect.Type{
		"lease": reflect.TypeFor[leaseJSON](), "last_lease": reflect.TypeFor[lastLeaseJSON](),
		"status_lease": reflect.TypeFor[statusLeaseJSON](), "reaped": reflect.TypeFor[reapedJSON](),
	}
	for kind, mk := range jsonTypes {
		typ := reflect.TypeOf(mk()).Elem()
		if typ.Kind() == reflect.Slice { // list: its elements' keys
			typ = typ.Elem()
		}
		types[kind] = typ
	}
	if got, want := jsonNames(reflect.TypeFor[findingJSON]()), []string{"kind", "task", "dir", "detail", "fixed"}; !slices.Equal(got, want) {
		t.Errorf("finding: keys %v, want %v", got, want)
	}
	for kind, typ := range types {
		got := jsonNames(typ)
		if want, ok := fixed[kind]; ok {
			if !slices.Equal(got, want) {
				t.Errorf("%s: keys %v, want %v", kind, got, want)
			}
			continue
		}
		if !slices.IsSorted(got) {
			t.Errorf("%s: keys %v are not in alphabetical order", kind, got)
		}
	}
}

// TestJSON_BigTokensKeepTheirDigits: a token above 2^53 (no float64 holds
// it) comes out exactly, in a result with notices and in a refusal that
// names nobody as the holder. Both used to go through map[string]any.
func TestJSON_BigTokensKeepTheirDigits(t *testing.T) {
	const big = 1<<63 + 1
	var stdout, stderr strings.Builder
	o := &output{json: true, stdout: &stdout, stderr: &stderr}
	o.notice(fence.Notice{Kind: fence.NoticeWarning, Name: "n", Detail: "d"})
	o.print(&claimJSON{Task: "t1", Token: big}, nil)
	if !strings.Contains(stdout.String(), `"notices":[{"notice":"warning","name":"n","detail":"d"}]`) || !strings.Contains(stdout.String(), `"token":9223372036854775809}`) {
		t.Errorf("result: %s", stdout.String())
	}
	o.notice(fence.Notice{Kind: fence.NoticeWarning, Name: "n", Detail: "d"})
	o.fail(&fence.StaleTokenError{Reason: fence.ReasonNotHeld, Task: "t1", Yours: big, State: "available"})
	want := `{"code":3,"reason":"not_held","message":"task t1: token 9223372036854775809 does not hold this task; task is available; nothing changed","task":"t1","your_token":9223372036854775809,"holder":null,"held_since":null,"state":"available","notices":[{"notice":"warning","name":"n","detail":"d"}]}` + "\n"
	if stderr.String() != want {
		t.Errorf("refusal:\n%s\nwant\n%s", stderr.String(), want)
	}
}

// TestJSON_OutputsDecodeStrictly (issue 10): each command's real --json
// output, from the binary, decodes strictly into its type and marshals
// back to the same bytes. The tree is world-writable, so every result
// carries a notice.
func TestJSON_OutputsDecodeStrictly(t *testing.T) {
	rt := newRunTree(t)
	if err := os.Chmod(rt.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	// step runs fencectl --json ARGS, wants exit code, and checks every
	// line of stdout and stderr against the kinds allowed there.
	step := func(code int, outKinds, errKinds []string, args ...string) (string, string) {
		t.Helper()
		c := rt.Cmd(append([]string{"--json"}, args...)...)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		if got := clitest.ExitCode(c.Run()); got != code {
			t.Fatalf("%v: exit %d, want %d\nstdout %s\nstderr %s", args, got, code, stdout.String(), stderr.String())
		}
		for _, s := range []struct {
			name  string
			text  []byte
			kinds []string
		}{{"stdout", stdout.Bytes(), outKinds}, {"stderr", stderr.Bytes(), errKinds}} {
			lines := bytes.Split(bytes.TrimSpace(s.text), []byte("\n"))
			if len(s.kinds) == 0 {
				if len(s.text) > 0 {
					t.Errorf("%v: %s %s, want nothing", args, s.name, s.text)
				}
				continue
			}
			for _, line := range lines {
				var errs []string
				for _, kind := range s.kinds {
					err := decodeStrict(kind, line)
					if err == nil {
						errs = nil
						break
					}
					errs = append(errs, fmt.Sprintf("%s: %v", kind, err))
				}
				if errs != nil {
					t.Errorf("%v: %s line\n%s\nfits none of %v:\n%s", args, s.name, line, s.kinds, strings.Join(errs, "\n"))
				}
			}
		}
		return stdout.String(), stderr.String()
	}
	one := func(kind string) []string { return []string{kind} }
	token := func(out, _ string) string {
		var v struct{ Token json.Number }
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		return v.Token.String()
	}

	step(0, one("init"), nil, "init")
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		step(0, one("task"), nil, "add", "--id", id)
	}
	tok1 := token(step(0, one("claim"), nil, "claim", "t1", "--agent", "a1", "--request-id", "r1"))
	tok2 := token(step(0, one("claim"), nil, "claim", "t2", "--format", "json"))
	step(0, one("fenced"), nil, "verify", "t1", "--token", tok1)
	step(0, one("fenced"), nil, "heartbeat", "t1", "--token", tok1)
	step(0, one("fenced"), nil, "put", "t1", "rep.txt", "-", "--token", tok1)
	step(0, one("show"), nil, "show", "t1")
	step(0, []string{"list", "notice"}, nil, "list")
	step(0, []string{"list", "notice"}, nil, "list", "--state", "done")
	step(0, one("status"), nil, "status")
	step(0, one("fenced"), nil, "complete", "t1", "--token", tok1)
	step(0, one("fenced"), nil, "complete", "t1", "--token", tok1)
	step(0, one("task"), nil, "requeue", "t1")
	step(0, one("revoke"), nil, "revoke", "t2")
	step(3, nil, one("error"), "complete", "t2", "--token", tok2) // nobody holds t2: holder null
	tok3 := token(step(0, one("claim"), nil, "claim", "t2", "--agent", "a2"))
	step(3, nil, one("error"), "complete", "t2", "--token", tok2) // a2 holds it
	step(0, one("fenced"), nil, "release", "t2", "--token", tok3)
	tok4 := token(step(0, one("claim"), nil, "claim", "t2"))
	step(0, one("fenced"), nil, "fail", "t2", "--token", tok4)
	step(0, one("cancel"), nil, "cancel", "t2", "--reason", "superseded")
	step(0, one("cancel"), nil, "cancel", "t2") // a retry
	step(6, nil, one("error"), "show", "nosuch")
	step(2, nil, one("error"), "claim", "--ttl", "-1s")
	step(0, one("claim"), nil, "claim", "t3", "--ttl", "1m")
	if testClock != nil { // the fencetest build: the lease expires on the test clock
		rt.Advance(2 * time.Minute)
		if out, _ := step(0, one("reap"), nil, "reap", "--dry-run"); !strings.Contains(out, `"task":"t3"`) {
			t.Errorf("reap --dry-run does not list t3: %s", out)
		}
	}
	step(0, one("reap"), nil, "reap")
	step(0, []string{"event", "notice"}, nil, "log")
	step(0, nil, []string{"run", "notice"}, "run", "--", "true")
	// CMD revokes its own task: the run ends in an error object carrying
	// its summary as "run".
	if _, stderr := step(3, nil, []string{"error", "notice"}, "run", "t4", "--", "sh", "-c", `"$FC" revoke t4 >/dev/null 2>&1; sleep 5`); !strings.Contains(stderr, `"run":{`) {
		t.Errorf("run whose task was revoked: no summary in the error object: %s", stderr)
	}
	if err := os.WriteFile(filepath.Join(rt.Dir, "available", "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	step(exitDrift, one("replay"), one("error"), "replay", "--check")
	step(0, one("replay"), nil, "replay")
	if err := os.Remove(filepath.Join(rt.Dir, ".fence", "journal.db")); err != nil {
		t.Fatal(err)
	}
	step(0, one("recover"), nil, "recover")
}
