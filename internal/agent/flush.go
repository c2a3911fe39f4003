package agent

import (
	"context"
	"net/http"
)

// A flushGate holds back the flushes of a streaming answer, so that the
// events of a process that ends at once reach the node in one write: the
// start event, the end event and the end of the stream. Without it each
// event is a write of its own, and a wake-up and a read on the node.
//
// Only the handler's goroutine uses it: connect flushes from Send, which
// the handler calls, and the end of the stream is written after the
// handler returns, on the same goroutine.
type flushGate struct {
	http.ResponseWriter
	held    bool
	pending bool // a flush was held back
}

// Flush flushes now, or once the gate opens while it is held.
func (g *flushGate) Flush() {
	if g.held {
		g.pending = true
		return
	}
	g.pending = false
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (g *flushGate) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// hold holds back the flushes until open. On a nil gate (a handler called
// without gateFlushes) it does nothing.
func (g *flushGate) hold() {
	if g != nil {
		g.held = true
	}
}

// open stops holding flushes back; what was held goes out with the next
// flush, or now when flush is set.
func (g *flushGate) open(flush bool) {
	if g == nil || !g.held {
		return
	}
	g.held = false
	if flush && g.pending {
		g.Flush()
	}
}

// holding reports whether the gate holds flushes back.
func (g *flushGate) holding() bool { return g != nil && g.held }

type gateKey struct{}

// gateOf returns the flush gate of a request's context, or nil.
func gateOf(ctx context.Context) *flushGate {
	g, _ := ctx.Value(gateKey{}).(*flushGate)
	return g
}

// gateFlushes gives every request to h a flush gate, open.
func gateFlushes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := &flushGate{ResponseWriter: w}
		h.ServeHTTP(g, r.WithContext(context.WithValue(r.Context(), gateKey{}, g)))
	})
}
