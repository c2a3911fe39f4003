// Package reqid carries an API request's ID (its X-Request-Id) in a
// context, from the server that gives it to whatever logs on the request's
// behalf, so that a message a user sees and the log lines with the detail
// behind it name the same request.
//
// A request has one ID wherever it goes: in a fleet, the control replica
// that took it gives it, and the node it sends the request on to uses that
// one (FleetHeader), so that the client's X-Request-Id is the one the
// node's logs and records name. It is not a tracing system: one ID, no
// spans.
package reqid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// Header is the answer's header that names the request.
const Header = "X-Request-Id"

// FleetHeader carries a control replica's ID of a request to the node it
// sends the request on to. A node takes it only from a control replica,
// over the fleet's mutual TLS (package server), and never passes it on; a
// client's own X-Request-Id is the client's business, and goes on
// untouched (to a sandbox's port, say).
const FleetHeader = "X-Warren-Request-Id"

// idLen is the length of an ID New gives: 8 random bytes in hex.
const idLen = 16

// New returns a new request ID: 16 random lowercase hex digits.
func New() string {
	b := make([]byte, idLen/2)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Valid reports whether id has the form New gives: a node checks an ID a
// replica sent before it puts it in its logs and records.
func Valid(id string) bool {
	if len(id) != idLen {
		return false
	}
	for i := range len(id) {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

type key struct{}

// With returns ctx carrying request ID id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// From returns the request ID ctx carries, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(key{}).(string)
	return id
}
