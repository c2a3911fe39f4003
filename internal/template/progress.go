package template

import (
	"bytes"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// lineWriter writes what it is given to out one complete line at a time,
// each prefixed with "step: ". It remembers the last line, for error
// messages. It is not safe for concurrent use; exec.Cmd calls it from one
// goroutine when it is both Stdout and Stderr. Only idle may be called from
// another goroutine.
type lineWriter struct {
	out  io.Writer
	step string
	buf  []byte
	last string
	// progress, when set, says which lines are progress for idle; every
	// line is when it is nil.
	progress     func(line string) bool
	lastProgress atomic.Int64 // unix nanoseconds of the last progress line
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

// touch counts now as progress.
func (w *lineWriter) touch() { w.lastProgress.Store(time.Now().UnixNano()) }

// idle is how long ago the last progress line (or touch) was.
func (w *lineWriter) idle() time.Duration {
	return time.Since(time.Unix(0, w.lastProgress.Load()))
}

func (w *lineWriter) line(s string) {
	if s == "" {
		return
	}
	if w.progress == nil || w.progress(s) {
		w.touch()
	}
	w.last = s
	fmt.Fprintf(w.out, "%s: %s\n", w.step, s)
}
