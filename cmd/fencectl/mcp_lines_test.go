//go:build !nomcp

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// TestMCPBadLines: lines the SDK would end the session for (not JSON, a
// batch, no JSON-RPC 2.0 message, an id that is an object, a message over
// the 16 MiB limit) are each answered with a JSON-RPC error of id null,
// change nothing, and the session goes on: the next call is answered,
// through the real binary's stdio.
func TestMCPBadLines(t *testing.T) {
	m := newMCPTree(t, "bolt", nil)
	m.mustCLI("add", "--id", "t1")
	var c claimJSON
	if err := json.Unmarshal([]byte(m.mustCLI("claim", "t1", "--agent", "a1", "--json")), &c); err != nil {
		t.Fatal(err)
	}
	before := m.journal()

	cmd := fencectlCmd(m.dir, "--dir", m.dir, "mcp", "--agent", "agent-default")
	cmd.Env = append(cmd.Env, m.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	answers := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var a map[string]any
			if json.Unmarshal(sc.Bytes(), &a) == nil {
				answers <- a
			}
		}
		close(answers)
	}()
	bad := []string{
		`this is not json`,
		`[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`,
		`{}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"complete","arguments":{"task":"t1","token":%d,"result":"%s"}}}`,
			c.Token, strings.Repeat("y", 17<<20)),
	}
	lines := append([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	}, bad...)
	lines = append(lines, fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"verify","arguments":{"task":"t1","token":%d}}}`, c.Token))
	go func() {
		for _, l := range lines {
			if _, err := io.WriteString(stdin, l+"\n"); err != nil {
				return
			}
		}
	}()

	var refused []string
	verified := false
	deadline := time.After(60 * time.Second)
	for !verified {
		select {
		case a, ok := <-answers:
			if !ok {
				t.Fatalf("the server ended the session after %d refusals %v; it said: %s", len(refused), refused, &stderr)
			}
			switch id := a["id"]; {
			case id == nil:
				e, _ := a["error"].(map[string]any)
				if e == nil || e["code"] == nil || e["message"] == "" {
					t.Errorf("an answer of id null that is no error: %v", a)
				}
				refused = append(refused, fmt.Sprint(e["code"], " ", e["message"]))
			case id == float64(3):
				t.Errorf("the oversized call was answered: %.300v", a)
			case id == float64(4):
				res, _ := a["result"].(map[string]any)
				if res == nil || res["isError"] == true || !strings.Contains(fmt.Sprint(res["structuredContent"]), "current:true") {
					t.Errorf("verify after the bad lines: %v", a)
				}
				verified = true
			}
		case <-deadline:
			t.Fatalf("no answer to verify; %d refusals %v; stderr: %s", len(refused), refused, &stderr)
		}
	}
	if len(refused) != len(bad) {
		t.Errorf("%d errors for %d bad lines: %v", len(refused), len(bad), refused)
	}
	if !strings.Contains(strings.Join(refused, "\n"), "the limit is 16777216 bytes") {
		t.Errorf("the oversized message's refusal does not say the limit: %v", refused)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("fencectl mcp after its client closed: %v\n%s", err, &stderr)
	}
	if after := m.journal(); after != before {
		t.Errorf("the bad lines changed the journal:\nbefore %s\nafter  %s", before, after)
	}
}
