package daemonlink

import (
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"unicode/utf8"
)

// The front's side of the wire, written by hand: the daemon reads and
// writes its JSON with encoding/json, but in a process that lives for one
// step, encoding/json's first use (reflection over the types, its caches,
// the pages of its code) cost about a quarter of a millisecond, a tenth of
// what the front costs. AppendRequest writes what json.Marshal would
// read back as the same Request; ParseReply reads what json.Marshal writes
// for a Reply. codec_test.go checks both against encoding/json.

// AppendRequest appends r as one JSON object to b.
func AppendRequest(b []byte, r Request) []byte {
	b = append(b, `{"args":[`...)
	for i, a := range r.Args {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, a)
	}
	b = append(b, `],"env":{`...)
	keys := make([]string, 0, len(r.Env))
	for k := range r.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, r.Env[k])
	}
	b = append(b, `},"root":`...)
	b = appendString(b, r.Root)
	if r.Cwd != "" {
		b = append(b, `,"cwd":`...)
		b = appendString(b, r.Cwd)
	}
	b = append(b, `,"timeout":`...)
	b = strconv.AppendInt(b, int64(r.Timeout), 10)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 is written as
// U+FFFD, as encoding/json writes it (the front sends no such words).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		b = utf8.AppendRune(b, r)
		i += n
	}
	return append(b, '"')
}

// ParseReply reads one Reply written by encoding/json: a flat object of
// booleans, strings, numbers (and nulls); unknown keys are skipped.
func ParseReply(line []byte) (Reply, error) {
	var r Reply
	p := &parser{b: line}
	if !p.consume('{') {
		return r, p.fail("an object")
	}
	if p.consume('}') {
		return r, p.end()
	}
	for {
		key, err := p.str()
		if err != nil {
			return r, err
		}
		if !p.consume(':') {
			return r, p.fail("':'")
		}
		switch key {
		case "ready":
			r.Ready, err = p.boolean()
		case "decline":
			r.Decline, err = p.str()
		case "stdout", "stderr":
			var s string
			if s, err = p.str(); err == nil {
				var raw []byte
				if raw, err = base64.StdEncoding.DecodeString(s); err == nil {
					if key == "stdout" {
						r.Stdout = raw
					} else {
						r.Stderr = raw
					}
				}
			}
		case "code":
			r.Code, err = p.integer()
		case "undo":
			r.Undo, err = p.str()
		default:
			err = p.skip()
		}
		if err != nil {
			return r, err
		}
		if p.consume('}') {
			return r, p.end()
		}
		if !p.consume(',') {
			return r, p.fail("',' or '}'")
		}
	}
}

// parser reads JSON values from b, at i.
type parser struct {
	b []byte
	i int
}

func (p *parser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) consume(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *parser) fail(want string) error {
	return fmt.Errorf("daemon reply: want %s at byte %d", want, p.i)
}

func (p *parser) end() error {
	p.space()
	if p.i != len(p.b) {
		return p.fail("the end")
	}
	return nil
}

// str reads a string, its escapes decoded as JSON's (strconv.Unquote's,
// and \/).
func (p *parser) str() (string, error) {
	if !p.consume('"') {
		return "", p.fail("a string")
	}
	start, escaped := p.i, false
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case '\\':
			escaped = true
			p.i += 2
			continue
		case '"':
			s := p.b[start:p.i]
			p.i++
			if !escaped {
				return string(s), nil
			}
			return unescape(s)
		}
		p.i++
	}
	return "", errors.New("daemon reply: an unterminated string")
}

// unescape decodes the escapes of a JSON string's body s. A surrogate
// pair (\ud83d\ude00) is one rune, as in JSON.
func unescape(s []byte) (string, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			out = append(out, s[i])
			continue
		}
		if i+1 >= len(s) {
			return "", errors.New("daemon reply: a bad escape")
		}
		i++
		switch c := s[i]; c {
		case '"', '\\', '/':
			out = append(out, c)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(s[i+1:])
			if !ok {
				return "", errors.New("daemon reply: a bad \\u escape")
			}
			i += 4
			if r >= 0xd800 && r < 0xdc00 && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if lo, ok := hex4(s[i+3:]); ok && lo >= 0xdc00 && lo < 0xe000 {
					r = (r-0xd800)<<10 + (lo - 0xdc00) + 0x10000
					i += 6
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", errors.New("daemon reply: a bad escape")
		}
	}
	return string(out), nil
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(s[:4]), 16, 16)
	return rune(n), err == nil
}

func (p *parser) boolean() (bool, error) {
	p.space()
	switch {
	case p.literal("true"):
		return true, nil
	case p.literal("false"), p.literal("null"):
		return false, nil
	}
	return false, p.fail("true or false")
}

func (p *parser) literal(w string) bool {
	if len(p.b)-p.i >= len(w) && string(p.b[p.i:p.i+len(w)]) == w {
		p.i += len(w)
		return true
	}
	return false
}

func (p *parser) integer() (int, error) {
	p.space()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	n, err := strconv.Atoi(string(p.b[start:p.i]))
	if err != nil {
		return 0, p.fail("an integer")
	}
	return n, nil
}

// skip skips a value of a key this reader does not know.
func (p *parser) skip() error {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '"' {
		_, err := p.str()
		return err
	}
	if p.consume('[') {
		return p.skipList(']', func() error { return p.skip() })
	}
	if p.consume('{') {
		return p.skipList('}', func() error {
			if _, err := p.str(); err != nil {
				return err
			}
			if !p.consume(':') {
				return p.fail("':'")
			}
			return p.skip()
		})
	}
	if p.literal("true") || p.literal("false") || p.literal("null") {
		return nil
	}
	start := p.i
	for p.i < len(p.b) && (p.b[p.i] == '-' || p.b[p.i] == '+' || p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E' || p.b[p.i] >= '0' && p.b[p.i] <= '9') {
		p.i++
	}
	if p.i == start {
		return p.fail("a value")
	}
	return nil
}

// skipList skips the items of an array or object up to its close.
func (p *parser) skipList(close byte, item func() error) error {
	if p.consume(close) {
		return nil
	}
	for {
		if err := item(); err != nil {
			return err
		}
		if p.consume(close) {
			return nil
		}
		if !p.consume(',') {
			return p.fail("',' or the close")
		}
	}
}

// ConfigBackend reads the backend a tree's journal config names (its
// "backend" key; see journal.Config).
func ConfigBackend(conf []byte) (string, error) {
	p := &parser{b: conf}
	if !p.consume('{') {
		return "", p.fail("an object")
	}
	backend := ""
	err := p.skipList('}', func() error {
		key, err := p.str()
		if err != nil {
			return err
		}
		if !p.consume(':') {
			return p.fail("':'")
		}
		if key == "backend" {
			backend, err = p.str()
			return err
		}
		return p.skip()
	})
	if err == nil {
		err = p.end()
	}
	return backend, err
}
