package client

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"warren/api"
)

// TestListFollowsPages: the List functions pass the state filter on and
// follow next_page_token until a page has none.
func TestListFollowsPages(t *testing.T) {
	pages := map[string]api.SandboxList{
		"":   {Sandboxes: []api.Sandbox{{ID: "sb-1"}, {ID: "sb-2"}}, NextPageToken: "t1"},
		"t1": {Sandboxes: []api.Sandbox{{ID: "sb-3"}}, NextPageToken: "t2"},
		"t2": {Sandboxes: []api.Sandbox{}},
	}
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		asked = append(asked, q.Get("page_token"))
		if q.Get("state") != "running,paused" || q.Get("all_tenants") != "true" {
			t.Errorf("query %v, want state=running,paused and all_tenants", q)
		}
		json.NewEncoder(w).Encode(pages[q.Get("page_token")])
	}))
	defer srv.Close()
	c := New(srv.URL, testKey)
	list, err := c.ListAllTenantsSandboxes(t.Context(), api.StateRunning, api.StatePaused)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	if !slices.Equal(ids, []string{"sb-1", "sb-2", "sb-3"}) || !slices.Equal(asked, []string{"", "t1", "t2"}) {
		t.Errorf("listed %v asking tokens %q; want sb-1..3 asking \"\", t1, t2", ids, asked)
	}
}
