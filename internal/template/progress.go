package template

import (
	"bytes"
	"fmt"
	"io"
)

// lineWriter writes what it is given to out one complete line at a time,
// each prefixed with "step: ". It remembers the last line, for error
// messages. It is not safe for concurrent use; exec.Cmd calls it from one
// goroutine when it is both Stdout and Stderr.
type lineWriter struct {
	out  io.Writer
	step string
	buf  []byte
	last string
}

func newLineWriter(out io.Writer, step string) *lineWriter {
	return &lineWriter{out: out, step: step}
}

// Write buffers p and writes out the lines it completes. Progress output is
// best effort: a failing out does not fail the build.
func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(bytes.TrimRight(w.buf[:i], "\r")))
		w.buf = w.buf[i+1:]
	}
}

// Flush writes out a final line that lacks its newline.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.line(string(w.buf))
		w.buf = w.buf[:0]
	}
}

// Printf writes one formatted line.
func (w *lineWriter) Printf(format string, args ...any) {
	w.line(fmt.Sprintf(format, args...))
}

func (w *lineWriter) line(s string) {
	if s == "" {
		return
	}
	w.last = s
	fmt.Fprintf(w.out, "%s: %s\n", w.step, s)
}
