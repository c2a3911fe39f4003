package main

import (
	"context"
	"io"
	"os"
	"strings"

	"warren/api"
	"warren/client"
)

// defaultPTY is the terminal size of `exec -t` when stdin is no terminal.
var defaultPTY = api.PTYSize{Cols: 80, Rows: 24}

// localTerminal is stdin when it is a terminal, else nil.
func (c *cli) localTerminal() *os.File {
	if f, ok := c.stdin.(*os.File); ok && isTerminal(f) {
		return f
	}
	return nil
}

// ptySize is the size of the local terminal, or defaultPTY.
func (c *cli) ptySize() api.PTYSize {
	if f := c.localTerminal(); f != nil {
		if cols, rows, ok := terminalSize(f); ok {
			return api.PTYSize{Cols: cols, Rows: rows}
		}
	}
	return defaultPTY
}

// ptyInput is what `exec -t` types into the remote terminal: stdin, then,
// when stdin is no terminal, ^D at its end (the terminal's EOF: its stdin
// cannot be closed).
func (c *cli) ptyInput() io.Reader {
	if c.localTerminal() != nil {
		return c.stdin
	}
	return io.MultiReader(c.stdin, strings.NewReader("\x04"))
}

// followResize sends the local terminal's new size to process pid at each
// resize, until the returned stop is called.
func (c *cli) followResize(ctx context.Context, cl *client.Client, id string, pid uint32) (stop func()) {
	f := c.localTerminal()
	if f == nil {
		return func() {}
	}
	resized, stopNotify := notifyResize()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-resized:
				if cols, rows, ok := terminalSize(f); ok {
					_ = cl.ResizeProcess(ctx, id, pid, cols, rows)
				}
			}
		}
	}()
	return func() {
		stopNotify()
		cancel()
		<-done
	}
}
