// Package reqid carries an API request's ID (its X-Request-Id) in a
// context, from the server that gives it to whatever logs on the request's
// behalf, so that a message a user sees and the log lines with the detail
// behind it name the same request.
package reqid

import "context"

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
