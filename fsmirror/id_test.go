package fsmirror_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencectl/fencectl/fsmirror"
)

func TestValidateID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		ok   bool
		why  string // substring of the message when !ok
	}{
		{"simple", "t1", true, ""},
		{"all allowed chars", "Task_2.v-3", true, ""},
		{"digit first", "0abc", true, ""},
		{"128 chars", strings.Repeat("a", 128), true, ""},
		{"129 chars", strings.Repeat("a", 129), false, "129 bytes"},
		{"empty", "", false, "must not be empty"},
		{"dot", ".", false, "not a path"},
		{"dotdot", "..", false, "not a path"},
		{"parent path", "../x", false, "not a path"},
		{"absolute", "/abs", false, "not a path"},
		{"subdir", "a/b", false, "not a path"},
		{"nul", "a\x00b", false, `'\x00' at byte 1`},
		{"newline", "a\nb", false, `'\n' at byte 1`},
		{"escape", "a\x1b[31m", false, `'\x1b' at byte 1`},
		{"space", "a b", false, `' ' at byte 1`},
		{"cyrillic look-alike", "t\u0430sk", false, "U+0430, not ASCII"},
		{"invalid utf8", "a\xffb", false, "invalid UTF-8 byte 0xff"},
		{"leading dot", ".hidden", false, "starts with '.'"},
		{"leading dash", "-rf", false, "starts with '-'"},
		{"leading underscore", "_x", false, "starts with '_'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fsmirror.ValidateID(tt.id)
			if tt.ok {
				if err != nil {
					t.Fatalf("ValidateID(%q) = %v, want nil", tt.id, err)
				}
				return
			}
			var ine *fsmirror.InvalidNameError
			if !errors.As(err, &ine) {
				t.Fatalf("ValidateID(%q) = %v, want *InvalidNameError", tt.id, err)
			}
			if ine.Name != tt.id {
				t.Errorf("Name = %q, want %q", ine.Name, tt.id)
			}
			msg := err.Error()
			for _, want := range []string{"invalid task id", "[A-Za-z0-9][A-Za-z0-9._-]{0,127}", tt.why} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not contain %q", msg, want)
				}
			}
		})
	}
}

func TestValidateID_MessageNamesRule(t *testing.T) {
	err := fsmirror.ValidateID("../x")
	want := `invalid task id "../x": must match [A-Za-z0-9][A-Za-z0-9._-]{0,127} (a file name, not a path)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

func TestValidateID_HugeNameTruncated(t *testing.T) {
	huge := strings.Repeat("x/", 5*1024) // 10 KB
	err := fsmirror.ValidateID(huge)
	if err == nil {
		t.Fatal("want error")
	}
	if n := len(err.Error()); n > 300 {
		t.Fatalf("message is %d bytes long, want it truncated: %.120s...", n, err)
	}
	if !strings.Contains(err.Error(), "10240 bytes") {
		t.Errorf("message %q does not give the real length", err)
	}
	var ine *fsmirror.InvalidNameError
	if errors.As(err, &ine) && ine.Name != huge {
		t.Error("Name field must keep the full name")
	}
}
