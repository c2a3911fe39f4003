package server

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"warren/api"
)

// pages follows next_page_token from path (which has a query already, or
// not) until the last page and returns every page's items, checking that
// no page is over limit.
func pages[T any](e *testEnv, path, key string, limit int, items func(body map[string]any) []T) []T {
	e.t.Helper()
	var out []T
	token := ""
	for n := 0; ; n++ {
		if n > 1000 {
			e.t.Fatalf("%s: more than 1000 pages", path)
		}
		p := path + sep(path) + fmt.Sprintf("limit=%d", limit)
		if token != "" {
			p += "&page_token=" + url.QueryEscape(token)
		}
		var body map[string]any
		e.call("GET", p, key, nil, http.StatusOK, &body)
		got := items(body)
		if len(got) > limit {
			e.t.Fatalf("%s: page of %d, limit %d", p, len(got), limit)
		}
		out = append(out, got...)
		next, _ := body["next_page_token"].(string)
		if next == "" {
			return out
		}
		token = next
	}
}

// bodySize is the length of the 200 answer to GET path.
func bodySize(e *testEnv, path, key string) int {
	e.t.Helper()
	resp := e.do("GET", path, key, nil)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: status %d, %v", path, resp.StatusCode, err)
	}
	return len(data)
}

func sep(path string) string {
	if strings.Contains(path, "?") {
		return "&"
	}
	return "?"
}

// ids reads the "id" of each object of the array body[field].
func ids(field string) func(map[string]any) []string {
	return func(body map[string]any) []string {
		var out []string
		list, _ := body[field].([]any)
		for _, v := range list {
			out = append(out, v.(map[string]any)["id"].(string))
		}
		return out
	}
}

func TestListSandboxPages(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	big := map[string]string{"BIG": strings.Repeat("x", 100_000)}
	var want []string
	for i := range 7 {
		var sb api.Sandbox
		e.call("POST", "/v1/sandboxes", e.keyA, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Env: big}}, http.StatusCreated, &sb)
		want = append(want, sb.ID)
		if i%3 == 0 {
			e.call("POST", "/v1/sandboxes/"+sb.ID+"/pause", e.keyA, nil, http.StatusOK, nil)
		}
	}
	e.call("POST", "/v1/sandboxes", e.keyB, nil, http.StatusCreated, nil)
	for _, limit := range []int{1, 2, 3, 7, 100} {
		got := pages(e, "/v1/sandboxes", e.keyA, limit, ids("sandboxes"))
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: pages %v, want %v", limit, got, want)
		}
	}
	// A listed sandbox carries no env: a page of 7 sandboxes of 100 KB of
	// env each stays small. GET still shows the env.
	if n := bodySize(e, "/v1/sandboxes", e.keyA); n > 10_000 {
		t.Errorf("list of 7 sandboxes with 100 KB envs is %d bytes", n)
	}
	var one api.Sandbox
	e.call("GET", "/v1/sandboxes/"+want[1], e.keyA, nil, http.StatusOK, &one)
	if len(one.Env["BIG"]) != 100_000 {
		t.Errorf("GET lost the env: %d bytes", len(one.Env["BIG"]))
	}

	// State filters: repeated, comma-separated, both.
	paused := []string{want[0], want[3], want[6]}
	running := []string{want[1], want[2], want[4], want[5]}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"state=paused", paused},
		{"state=running", running},
		{"state=running&state=paused", want},
		{"state=running,paused", want},
		{"state=stopped,failed", nil},
	} {
		if got := pages(e, "/v1/sandboxes?"+tc.query, e.keyA, 2, ids("sandboxes")); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.query, got, tc.want)
		}
	}

	// Pages stay right while sandboxes come and go: delete the last one
	// listed and one not listed yet, create one; nothing is answered
	// twice, the new one comes last.
	var first api.SandboxList
	e.call("GET", "/v1/sandboxes?limit=3", e.keyA, nil, http.StatusOK, &first)
	for _, id := range []string{want[2], want[4]} {
		e.call("DELETE", "/v1/sandboxes/"+id, e.keyA, nil, http.StatusNoContent, nil)
	}
	var late api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, nil, http.StatusCreated, &late)
	var rest api.SandboxList
	e.call("GET", "/v1/sandboxes?limit=100&page_token="+url.QueryEscape(first.NextPageToken), e.keyA, nil, http.StatusOK, &rest)
	var got []string
	for _, sb := range rest.Sandboxes {
		got = append(got, sb.ID)
	}
	if w := []string{want[3], want[5], want[6], late.ID}; !slices.Equal(got, w) || rest.NextPageToken != "" {
		t.Errorf("page after deletes and a create = %v (next %q), want %v", got, rest.NextPageToken, w)
	}
}

func TestListBadParameters(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, nil, http.StatusCreated, &sb)
	e.call("POST", "/v1/sandboxes", e.keyA, nil, http.StatusCreated, nil)
	var sn api.Snapshot
	e.call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", e.keyA, nil, http.StatusCreated, &sn)
	var page api.SandboxList
	e.call("GET", "/v1/sandboxes?limit=1", e.keyA, nil, http.StatusOK, &page)
	if page.NextPageToken == "" {
		t.Fatal("no next_page_token on a page of 1 of 2")
	}
	tok := url.QueryEscape(page.NextPageToken)
	for _, tc := range []struct{ path, want string }{
		{"/v1/sandboxes?limit=0", "limit"},
		{"/v1/sandboxes?limit=1001", "1 to 1000"},
		{"/v1/sandboxes?limit=ten", "limit"},
		{"/v1/snapshots?limit=-1", "limit"},
		{"/v1/keys?limit=5000", "limit"},
		{"/v1/sandboxes?page_token=garbage!", "page_token"},
		{"/v1/sandboxes?page_token=e30", "page_token"}, // {}
		{"/v1/snapshots?page_token=" + tok, "another listing"},
		{"/v1/sandboxes/" + sb.ID + "/snapshots?page_token=" + tok, "another listing"},
		{"/v1/snapshots/" + sn.ID + "/lineage?page_token=" + tok, "another listing"},
		{"/v1/sandboxes?state=sleeping", "starting, running, paused, moving, stopped, failed"},
		{"/v1/sandboxes?state=running,", "bad state"},
		{"/v1/snapshots?state=running", "pending, durable, failed"},
		{"/v1/templates?state=running", "no state filter"},
		{"/v1/snapshots/" + sn.ID + "/lineage?limit=1001", "limit"},
	} {
		key := e.keyA
		if strings.HasPrefix(tc.path, "/v1/keys") {
			key = e.admin
		}
		if got := apiError(t, e.do("GET", tc.path, key, nil), http.StatusBadRequest, api.CodeBadRequest); !strings.Contains(got.Message, tc.want) {
			t.Errorf("GET %s: %q, want it to say %q", tc.path, got.Message, tc.want)
		}
	}
}

// TestSnapshotListIsLinear pins the 22 KB list of 30 snapshots: each
// snapshot embedded its whole lineage, so the list grew with the square of
// the chain. A snapshot now names its parent only; the chain is its own
// paged route.
func TestSnapshotListIsLinear(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, nil, http.StatusCreated, &sb)
	var chain []string
	size := func() int { return bodySize(e, "/v1/sandboxes/"+sb.ID+"/snapshots?limit=1000", e.keyA) }
	var at10 int
	for i := range 40 {
		var sn api.Snapshot
		e.call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", e.keyA, nil, http.StatusCreated, &sn)
		if want := append([]string{""}, chain...)[len(chain)]; sn.Parent != want {
			t.Fatalf("snapshot %d: parent %q, want %q", i, sn.Parent, want)
		}
		chain = append(chain, sn.ID)
		if i == 9 {
			at10 = size()
		}
	}
	if at40 := size(); at40 > 4*at10+4*at10/10 {
		t.Errorf("list of 40 snapshots is %d bytes, of 10 %d: more than linear", at40, at10)
	}

	// The lineage of the last: every other snapshot, nearest first, in
	// pages of any size.
	want := slices.Clone(chain[:len(chain)-1])
	slices.Reverse(want)
	last := chain[len(chain)-1]
	for _, limit := range []int{1, 7, 39, 1000} {
		got := pages(e, "/v1/snapshots/"+last+"/lineage", e.keyA, limit, func(body map[string]any) []string {
			var out []string
			for _, v := range body["ancestors"].([]any) {
				out = append(out, v.(string))
			}
			return out
		})
		if !slices.Equal(got, want) {
			t.Errorf("lineage in pages of %d = %v, want %v", limit, got, want)
		}
	}
	var root api.Lineage
	e.call("GET", "/v1/snapshots/"+chain[0]+"/lineage", e.keyA, nil, http.StatusOK, &root)
	if root.Ancestors == nil || len(root.Ancestors) != 0 || root.NextPageToken != "" {
		t.Errorf("lineage of the first snapshot = %+v, want empty", root)
	}
	apiError(t, e.do("GET", "/v1/snapshots/"+last+"/lineage", e.keyB, nil), http.StatusNotFound, api.CodeNotFound)
}

func TestListKeysPages(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	for _, tenant := range []string{"c", "d", "e"} {
		e.call("POST", "/v1/keys", e.admin, api.CreateKeyRequest{Tenant: tenant}, http.StatusCreated, nil)
	}
	var all api.KeyList
	e.call("GET", "/v1/keys", e.admin, nil, http.StatusOK, &all)
	var want []string
	for _, k := range all.Keys {
		want = append(want, k.ID)
	}
	if len(want) != 6 { // a, b, the admin's, c, d, e
		t.Fatalf("%d keys, want 6", len(want))
	}
	if got := pages(e, "/v1/keys", e.admin, 4, ids("keys")); !slices.Equal(got, want) {
		t.Errorf("key pages = %v, want %v", got, want)
	}
}
