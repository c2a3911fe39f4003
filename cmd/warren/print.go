package main

import (
	"encoding/json"
	"io"
	"text/tabwriter"
)

// printJSON writes v as indented JSON and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printTable writes v as printJSON does when asJSON is set, and otherwise
// the table that rows writes to tw: lines of tab-separated cells, aligned in
// columns pad spaces apart.
func printTable(w io.Writer, asJSON bool, v any, pad int, rows func(tw io.Writer)) error {
	if asJSON {
		return printJSON(w, v)
	}
	tw := tabwriter.NewWriter(w, 0, 0, pad, ' ', 0)
	rows(tw)
	return tw.Flush()
}
