// Package listing is the shape of a list request that the API server, the
// sandbox manager and the stores share: a page in creation order, and the
// tenant that means every tenant.
package listing

import "time"

// Page selects one page of a list in creation order: the records after
// After (by CreatedAt, then ID), at most Limit of them (0: all of them).
// A cursor names a place, not a position, so that a page is right however
// many records were inserted or deleted since the one before it.
type Page struct {
	After Cursor
	Limit int
}

// Cursor is a record's place in creation order. The zero Cursor is before
// every record.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// AnyTenant, given where a tenant is asked for, means every tenant: the
// admin scope of listing and deleting sandboxes. No tenant can be called
// it (tenant names are a-z, 0-9, '_' and '-').
const AnyTenant = "*"
