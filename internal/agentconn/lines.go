package agentconn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	processpb "warren/internal/agent/pb/process"
)

// RunLines runs proc in the sandbox, giving out each line of its output
// (nil: none). An exit other than 0 is an error ending with the last lines
// it wrote.
func (c *Conn) RunLines(ctx context.Context, proc *processpb.ProcessConfig, out func(line string)) error {
	w := &Lines{Emit: out}
	end, _, err := c.Run(ctx, &processpb.StartRequest{Process: proc}, w, w)
	w.Flush()
	if err != nil {
		return err
	}
	if end.GetExited() && end.GetExitCode() == 0 {
		return nil
	}
	status := end.GetStatus()
	if end.GetExited() {
		status = fmt.Sprintf("exit code %d", end.GetExitCode())
	}
	if tail := w.Tail(); tail != "" {
		status += ", after:\n" + tail
	}
	return errors.New(status)
}

// Lines is an io.Writer that splits output into lines for Emit (nil:
// none), and keeps the last tailLines of them (each cut to maxLine bytes).
type Lines struct {
	Emit    func(string)
	partial []byte
	last    []string
}

const (
	tailLines = 20
	maxLine   = 512
)

func (l *Lines) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.line(l.partial[:i])
		l.partial = l.partial[i+1:]
	}
	if len(l.partial) > 64<<10 { // a line that never ends
		l.line(l.partial)
		l.partial = l.partial[:0]
	}
	return len(p), nil
}

func (l *Lines) line(b []byte) {
	s := string(bytes.ToValidUTF8(b[:min(len(b), maxLine)], []byte("?")))
	if l.Emit != nil {
		l.Emit(s)
	}
	if l.last = append(l.last, s); len(l.last) > tailLines {
		l.last = l.last[1:]
	}
}

// Flush gives out a last line that did not end.
func (l *Lines) Flush() {
	if len(l.partial) > 0 {
		l.line(l.partial)
		l.partial = nil
	}
}

// Tail is the last lines written, joined.
func (l *Lines) Tail() string { return strings.Join(l.last, "\n") }
