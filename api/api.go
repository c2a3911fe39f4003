// Package api is the contract of warren's HTTP/JSON API: the request and
// response bodies, the error body and its codes. The server
// (internal/server) and the Go client (package client) both use it; it does
// no I/O. The OpenAPI document served at /openapi.json describes the same
// shapes (openapi.json beside this file).
package api

// Idempotency headers (docs/API.md, "Retries"): a request sent with
// IdempotencyKeyHeader takes effect once, and an answer given again to a
// retry carries ReplayedHeader: true.
const (
	IdempotencyKeyHeader = "Idempotency-Key"
	ReplayedHeader       = "Idempotent-Replayed"
)

// Lists (docs/API.md, "Lists"). Every list answers one page: at most limit
// items (DefaultListLimit when not asked, at most MaxListLimit), in a fixed
// order, and a NextPageToken while more may follow. The token is opaque; it
// names the last item answered, not a position, so the pages of a list stay
// right while items are added or removed: none is answered twice, and every
// item that exists from the first page to the last is answered once.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// A directory listing's pages are larger, and bounded on their own.
	DefaultFileListLimit = 1000
	MaxFileListLimit     = 10000
	// DefaultLineageLimit is the page size of a lineage (at most
	// MaxListLimit).
	DefaultLineageLimit = MaxListLimit
)
