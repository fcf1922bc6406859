//go:build !nomcp

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The client's lines, checked before the SDK reads them.
//
// The SDK's stdio transport ends the whole session on one bad line: a
// line longer than its limit, one that is not JSON, a JSON-RPC batch, an
// object that is not a JSON-RPC 2.0 message. An agent's session holds its
// claims' context, and one oversized result must not cost it the rest:
// each such line is answered here with a JSON-RPC error (id null, as
// JSON-RPC says when the id cannot be read) and skipped; the session goes
// on.

// mcpMaxLine is the longest message the server reads: a put or complete
// whose content is larger belongs to `fencectl put`, which streams.
const mcpMaxLine = 16 << 20

// lineWriter writes whole lines, one at a time: the SDK's answers and
// this filter's go out on the same stdout.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (*lineWriter) Close() error { return nil }

// checkedLines returns what the SDK reads: the lines of in that are one
// JSON-RPC 2.0 message each, no longer than maxLine. Every other line is
// answered on out with an error and dropped. Reading in ends at its EOF,
// or when the SDK closes what it reads.
func checkedLines(in io.Reader, out *lineWriter, maxLine int) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		br := bufio.NewReaderSize(in, 64<<10)
		for {
			line, size, err := readLine(br, maxLine)
			if size > 0 {
				if code, why := checkLine(line, size, maxLine); why != "" {
					if out.answerError(code, why) != nil {
						pw.Close()
						return
					}
				} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
					return // the session is over
				}
			}
			if err != nil {
				pw.CloseWithError(err) // io.EOF ends the session as the client's close
				return
			}
		}
	}()
	return pr
}

// readLine reads one line of in, without its newline and trimmed of
// spaces. size is the line's length; the bytes of a line longer than
// maxLine are not kept (line is nil), only counted.
func readLine(br *bufio.Reader, maxLine int) (line []byte, size int, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		size += len(chunk)
		if size <= maxLine+1 { // the newline does not count
			line = append(line, chunk...)
		} else {
			line = nil
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if size > maxLine+1 {
			return nil, size, err
		}
		line = bytes.TrimSpace(line)
		return line, len(line), err
	}
}

// checkLine says why a line cannot go to the SDK, with the JSON-RPC
// error code; why is empty for a line that can.
func checkLine(line []byte, size, maxLine int) (code int64, why string) {
	switch {
	case line == nil:
		return jsonrpc.CodeInvalidRequest, fmt.Sprintf("message of %d bytes refused: the limit is %d bytes; write a large output with `fencectl put` (it streams) and keep tool calls small", size, maxLine)
	case line[0] == '[':
		return jsonrpc.CodeInvalidRequest, "JSON-RPC batches are not supported: send one message per line"
	case !json.Valid(line):
		return jsonrpc.CodeParseError, "not JSON: each line must be one JSON-RPC 2.0 message"
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return jsonrpc.CodeInvalidRequest, "not a JSON-RPC 2.0 message: " + err.Error()
	}
	return 0, ""
}

// answerError writes a JSON-RPC error response with id null.
func (l *lineWriter) answerError(code int64, message string) error {
	data, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error":   map[string]any{"code": code, "message": message},
	})
	if err != nil {
		return errors.Join(errors.New("mcp: encoding an error answer"), err)
	}
	_, err = l.Write(append(data, '\n'))
	return err
}
