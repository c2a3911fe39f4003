package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
)

// lineWriter cuts what is written to it into lines and emits each, without
// its end of line. Writes may come from several goroutines; none are
// emitted after close, which emits an unterminated last line.
type lineWriter struct {
	emit func(line string)

	mu     sync.Mutex // guards buf and closed, and serializes emit
	buf    []byte
	closed bool
}

// maxLine bounds the text kept waiting for an end of line: once that much
// is waiting, it is emitted as a line of its own.
const maxLine = 64 << 10

// Write emits the complete lines in p and keeps the rest.
func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed {
		return len(p), nil
	}
	lw.buf = append(lw.buf, p...)
	for {
		i := bytes.IndexByte(lw.buf, '\n')
		if i < 0 {
			if len(lw.buf) >= maxLine {
				lw.emit(string(lw.buf))
				lw.buf = lw.buf[:0]
			}
			return len(p), nil
		}
		lw.emit(string(bytes.TrimSuffix(lw.buf[:i], []byte("\r"))))
		lw.buf = lw.buf[i+1:]
	}
}

// close emits what is left and stops emitting.
func (lw *lineWriter) close() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if len(lw.buf) > 0 && !lw.closed {
		lw.emit(string(lw.buf))
	}
	lw.buf = nil
	lw.closed = true
}

// ndjson writes a stream of JSON objects, one a line, flushing each. It is
// safe for concurrent use. Write errors (the caller left) are remembered and
// end the stream silently.
type ndjson struct {
	w http.ResponseWriter

	mu      sync.Mutex // guards the fields below and writes to w
	started bool
	err     error
}

// newNDJSON starts nothing yet: the status and headers go with the first
// line, so an error before it can still be a plain error answer.
func newNDJSON(w http.ResponseWriter) *ndjson {
	return &ndjson{w: w}
}

// began reports whether the first line has been sent.
func (n *ndjson) began() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.started
}

// broken reports whether a write to the caller failed.
func (n *ndjson) broken() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err != nil
}

// send writes v as one line and flushes it; it returns the first write
// error seen.
func (n *ndjson) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode stream event: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.err != nil {
		return n.err
	}
	if !n.started {
		n.w.Header().Set("Content-Type", "application/x-ndjson")
		n.w.Header().Set("X-Content-Type-Options", "nosniff")
		n.w.WriteHeader(http.StatusOK)
		n.started = true
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		n.err = err
		return err
	}
	if err := http.NewResponseController(n.w).Flush(); err != nil {
		n.err = err
	}
	return n.err
}
