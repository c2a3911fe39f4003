package store

import (
	"strings"

	"warren/internal/listing"
)

// filter is the WHERE conditions of a list query and their arguments.
type filter struct {
	conds []string
	args  []any
}

// add appends a condition with its arguments.
func (f *filter) add(cond string, args ...any) {
	f.conds = append(f.conds, cond)
	f.args = append(f.args, args...)
}

// in appends "column IN (values)"; nothing when values is empty.
func (f *filter) in(column string, values []string) {
	if len(values) == 0 {
		return
	}
	f.add(column+" IN (?"+strings.Repeat(", ?", len(values)-1)+")", anys(values)...)
}

// query completes q (a SELECT ... FROM table) with the filter's conditions,
// those of page, and the creation order.
func (f filter) query(q string, page listing.Page) (string, []any) {
	if page.After != (listing.Cursor{}) {
		f.add("(created_at, id) > (?, ?)", page.After.CreatedAt.UnixNano(), page.After.ID)
	}
	if len(f.conds) > 0 {
		q += " WHERE " + strings.Join(f.conds, " AND ")
	}
	q += " ORDER BY created_at, id"
	if page.Limit > 0 {
		q += " LIMIT ?"
		f.args = append(f.args, page.Limit)
	}
	return q, f.args
}

func anys(values []string) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = v
	}
	return out
}
