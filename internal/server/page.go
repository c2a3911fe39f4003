package server

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"warren/api"
	"warren/internal/listing"
)

// Every list answers one page (docs/API.md, "Lists"): ?limit=N items at
// most, ?page_token= from the answer before to go on, and for lists of
// things with a state, ?state= (repeated or comma-separated) to keep only
// those. A token names the last item answered, never a position, so pages
// stay right while items come and go.

// pageToken is the content of a page_token: base64url of its JSON, opaque
// to callers. It continues only the listing it came from (List, Scope),
// from the item it names (At, Key). Tampering with one can only move where
// a listing resumes: every listing still shows the caller only its own.
type pageToken struct {
	// List names the list: "sandboxes", "snapshots", "files"...
	List string `json:"l"`
	// Scope is what the list is of: a sandbox, a directory, a snapshot.
	Scope string `json:"s,omitempty"`
	// At is the last item's creation time in Unix nanoseconds, for lists in
	// creation order.
	At int64 `json:"t,omitempty"`
	// Key is the last item's id, name, pid or path.
	Key string `json:"k"`
}

func (t pageToken) String() string {
	b, _ := json.Marshal(t) // a struct of strings and an int cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// listRequest is what a list request asks for.
type listRequest struct {
	list, scope string
	limit       int
	// after is where the page starts; nil for the first page.
	after *pageToken
	// states keeps items in these states; empty keeps every item.
	states []string
}

// State filters of the lists that have one.
var (
	sandboxStates  = []string{api.StateStarting, api.StateRunning, api.StatePaused, api.StateMoving, api.StateStopped, api.StateFailed}
	snapshotStates = []string{api.SnapshotPending, api.SnapshotDurable, api.SnapshotFailed}
	processStates  = []string{api.ProcessRunning, api.ProcessExited}
)

// parseList reads the paging and state parameters of list (of scope) from
// r. states is what the list's state filter takes; nil for a list without
// one. Each bad parameter is a 400 that names it.
func parseList(r *http.Request, list, scope string, defaultLimit, maxLimit int, states []string) (listRequest, error) {
	q := r.URL.Query()
	lr := listRequest{list: list, scope: scope, limit: defaultLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return listRequest{}, api.Errorf(api.CodeBadRequest, "bad limit %q: want an integer from 1 to %d (default %d)", v, maxLimit, defaultLimit)
		}
		lr.limit = n
	}
	if v := q.Get("page_token"); v != "" {
		t, err := decodePageToken(v)
		if err != nil {
			return listRequest{}, err
		}
		if t.List != list || t.Scope != scope {
			return listRequest{}, api.Errorf(api.CodeBadRequest, "bad page_token: it continues another listing; start again without it")
		}
		lr.after = &t
	}
	for _, v := range q["state"] {
		if states == nil {
			return listRequest{}, api.Errorf(api.CodeBadRequest, "this list has no state filter")
		}
		for st := range strings.SplitSeq(v, ",") {
			if !slices.Contains(states, st) {
				return listRequest{}, api.Errorf(api.CodeBadRequest, "bad state %q: want one of %s", st, strings.Join(states, ", "))
			}
			if !slices.Contains(lr.states, st) {
				lr.states = append(lr.states, st)
			}
		}
	}
	return lr, nil
}

// decodePageToken reads a page_token; anything this server did not make
// is a 400.
func decodePageToken(v string) (pageToken, error) {
	bad := api.Errorf(api.CodeBadRequest, "bad page_token %.40q: pass the next_page_token of an answer unchanged", v)
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return pageToken{}, bad
	}
	var t pageToken
	if err := json.Unmarshal(b, &t); err != nil || t.List == "" {
		return pageToken{}, bad
	}
	return t, nil
}

// storePage is the store's page for a list in creation order: one item more
// than the limit, to learn whether another page follows.
func (lr listRequest) storePage() listing.Page {
	p := listing.Page{Limit: lr.limit + 1}
	if lr.after != nil {
		p.After = listing.Cursor{CreatedAt: time.Unix(0, lr.after.At), ID: lr.after.Key}
	}
	return p
}

// afterKey is the key the page starts after; "" for the first page.
func (lr listRequest) afterKey() string {
	if lr.after == nil {
		return ""
	}
	return lr.after.Key
}

// page cuts items, fetched with one more than the limit, to the limit, and
// returns the token of the next page ("" when this is the last), made by
// mark from the page's last item.
func page[T any](lr listRequest, items []T, mark func(last T) pageToken) ([]T, string) {
	if items == nil {
		items = []T{}
	}
	if len(items) <= lr.limit {
		return items, ""
	}
	items = items[:lr.limit]
	return items, lr.next(mark(items[len(items)-1]))
}

// next is the page_token that continues this listing after t's item.
func (lr listRequest) next(t pageToken) string {
	t.List, t.Scope = lr.list, lr.scope
	return t.String()
}

// byCreation marks an item of a list in creation order.
func byCreation(created time.Time, id string) pageToken {
	return pageToken{At: created.UnixNano(), Key: id}
}
