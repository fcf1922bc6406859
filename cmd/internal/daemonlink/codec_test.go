package daemonlink

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// The front's hand-written side of the wire must read and write exactly
// what the daemon's encoding/json writes and reads.

var texts = []string{
	"", "claim", "a b", `quote " and \ backslash`, "tab\tnewline\ncr\r", "\x00\x01\x1f\x7f",
	"<script>&amp;</script>", "\u2028\u2029", "héllo wörld", "emoji 😀 and 𝄞", "/slash/", "bad\xffutf8",
}

func TestAppendRequest_ReadsBackAsEncodingJSONDoes(t *testing.T) {
	for _, a := range texts {
		for _, env := range []map[string]string{nil, {}, {"FENCE_AGENT": a, "FENCE_DIR": "/t", "FENCE_" + a: a}} {
			for _, cwd := range []string{"", "/w/" + a} {
				r := Request{Args: []string{"fencectl", "claim", a, "--agent", a}, Env: env, Root: "/t/" + a, Cwd: cwd, Timeout: 1500 * time.Millisecond}
				var got Request
				if err := json.Unmarshal(AppendRequest(nil, r), &got); err != nil {
					t.Fatalf("%q: %v\n%s", a, err, AppendRequest(nil, r))
				}
				// What encoding/json itself would carry: invalid UTF-8 as
				// U+FFFD, and an empty map as an empty map.
				b, _ := json.Marshal(r)
				var want Request
				if err := json.Unmarshal(b, &want); err != nil {
					t.Fatal(err)
				}
				if got.Env == nil {
					got.Env = map[string]string{}
				}
				if want.Env == nil {
					want.Env = map[string]string{}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%q: read back %+v, want %+v", a, got, want)
				}
			}
		}
	}
}

func TestParseReply_ReadsWhatEncodingJSONWrites(t *testing.T) {
	replies := []Reply{{}, {Ready: true}, {Code: 3}, {Code: -1}, {Code: 1 << 40}}
	for _, s := range texts {
		replies = append(replies,
			Reply{Decline: s},
			Reply{Stdout: []byte(s), Stderr: []byte(s + s), Code: 4},
			Reply{Stdout: []byte{0, 255, 254, '\n'}},
		)
	}
	for _, r := range replies {
		// As the daemon writes it: an Encoder, HTML escaped, one line.
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(r); err != nil {
			t.Fatal(err)
		}
		got, err := ParseReply(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
		if err != nil {
			t.Fatalf("%s: %v", buf.Bytes(), err)
		}
		var want Reply
		if err := json.Unmarshal(buf.Bytes(), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read %+v, want %+v", buf.Bytes(), got, want)
		}
	}
}

func TestParseReply_RefusesWhatIsNotOne(t *testing.T) {
	for _, bad := range []string{"", "{", `{"code":}`, `{"code":"3"}`, `{"ready":tru}`, `{"stdout":"not base64!"}`, `{"decline":"x"`, `{"code":1}x`, `[1]`, `{"x":{]}`, `{"x":[1,}`} {
		if r, err := ParseReply([]byte(bad)); err == nil {
			t.Errorf("%s: read as %+v, want an error", bad, r)
		}
	}
	// Keys it does not know are skipped, as encoding/json skips them.
	r, err := ParseReply([]byte(`{"new":"x","n":1.5e3,"b":null,"l":[1,"]",{"a":[]}],"o":{"k":"v"},"code":2}`))
	if err != nil || r.Code != 2 {
		t.Errorf("unknown keys: %+v, %v", r, err)
	}
}

// FuzzParseReply: whatever encoding/json writes for a Reply reads back the
// same.
func FuzzParseReply(f *testing.F) {
	for _, s := range texts {
		f.Add(s, []byte(s), 3, true)
	}
	f.Fuzz(func(t *testing.T, decline string, out []byte, code int, ready bool) {
		r := Reply{Ready: ready, Decline: decline, Stdout: out, Stderr: out, Code: code}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseReply(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		var want Reply
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: read %+v, want %+v", b, got, want)
		}
	})
}

// TestConfigBackend reads the backend of a journal config as
// encoding/json writes it (journal.Config, indented, with its lists).
func TestConfigBackend(t *testing.T) {
	conf := map[string]any{"backend": "etcd", "endpoints": []string{"127.0.0.1:2379", "[::1]:2379"}, "prefix": "/p/\"q\"", "tls": map[string]string{"cacert": "/c"}}
	for _, indent := range []string{"", "  "} {
		b, err := json.MarshalIndent(conf, "", indent)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ConfigBackend(b); err != nil || got != "etcd" {
			t.Errorf("%s: %q, %v; want etcd", b, got, err)
		}
	}
	if got, err := ConfigBackend([]byte(`{"prefix":"x"}`)); err != nil || got != "" {
		t.Errorf("no backend key: %q, %v", got, err)
	}
	for _, bad := range []string{"", "[]", `{"backend":1}`, `{"backend":"etcd"`} {
		if got, err := ConfigBackend([]byte(bad)); err == nil {
			t.Errorf("%s: %q, want an error", bad, got)
		}
	}
}
