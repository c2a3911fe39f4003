package e2b

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// TestSecrets: E2B's secret calls become warren's, in E2B's shapes: a
// create that is refused for a name that has a secret, an update refused
// for a ref that has none, either addressed by ID or by name.
func TestSecrets(t *testing.T) {
	const secID = "sec_abcdefghijklmnopqrst"
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	notFound := api.ErrorBody{Error: *api.Errorf(api.CodeNotFound, "no secret missing")}
	v1 := api.Secret{ID: secID, Name: "openai-key", Version: 1, Metadata: map[string]string{"team": "ml"}, CreatedAt: at, UpdatedAt: at}
	v2 := v1
	v2.Version, v2.UpdatedAt = 2, at.Add(time.Minute)
	const e2bV1 = `{"secretID":"` + secID + `","name":"openai-key","currentVersion":1,"metadata":{"team":"ml"},"createdAt":"2026-12-07T10:00:00Z","updatedAt":"2026-12-07T10:00:00Z"}`
	const e2bV2 = `{"secretID":"` + secID + `","name":"openai-key","currentVersion":2,"metadata":{"team":"ml"},"createdAt":"2026-12-07T10:00:00Z","updatedAt":"2026-12-07T10:01:00Z"}`
	for _, tc := range []struct {
		name, method, path, body string
		answers                  map[string]any // "METHOD PATH" → a body; a status first when it is an int
		status                   int
		answer                   string // "" for none checked
		calls                    []string
		sent                     string // the PUT's body, when checked
	}{
		{"a create, its name in lower case", "POST", "/e2b/secrets", `{"name":"OpenAI-Key","value":"s3cr3t","metadata":{"team":"ml"}}`,
			map[string]any{"GET /v1/secrets/openai-key": []any{404, notFound}, "PUT /v1/secrets/openai-key": []any{201, v1}},
			http.StatusCreated, e2bV1,
			[]string{"GET /v1/secrets/openai-key", "PUT /v1/secrets/openai-key"}, `{"value":"s3cr3t","metadata":{"team":"ml"}}`},
		{"a create of a name that has a secret", "POST", "/e2b/secrets", `{"name":"openai-key","value":"s3cr3t"}`,
			map[string]any{"GET /v1/secrets/openai-key": []any{200, v1}},
			http.StatusConflict, "", []string{"GET /v1/secrets/openai-key"}, ""},
		{"a create that another create beat to the name", "POST", "/e2b/secrets", `{"name":"openai-key","value":"s3cr3t"}`,
			map[string]any{"GET /v1/secrets/openai-key": []any{404, notFound}, "PUT /v1/secrets/openai-key": []any{200, v2}},
			http.StatusConflict, "", []string{"GET /v1/secrets/openai-key", "PUT /v1/secrets/openai-key"}, ""},
		{"a create of a name like an ID", "POST", "/e2b/secrets", `{"name":"sec_x","value":"s3cr3t"}`,
			nil, http.StatusBadRequest, "", nil, ""},
		{"a create without a value", "POST", "/e2b/secrets", `{"name":"openai-key"}`,
			nil, http.StatusBadRequest, "", nil, ""},
		{"an update by ID", "POST", "/e2b/secrets/" + secID, `{"value":"n3w"}`,
			map[string]any{"GET /v1/secrets/" + secID: []any{200, v1}, "PUT /v1/secrets/openai-key": []any{200, v2}},
			http.StatusOK, e2bV2,
			[]string{"GET /v1/secrets/" + secID, "PUT /v1/secrets/openai-key"}, `{"value":"n3w"}`},
		{"an update of what has no secret creates none", "POST", "/e2b/secrets/missing", `{"value":"n3w"}`,
			map[string]any{"GET /v1/secrets/missing": []any{404, notFound}},
			http.StatusNotFound, "", []string{"GET /v1/secrets/missing"}, ""},
		{"an update that found its secret deleted and made anew", "POST", "/e2b/secrets/openai-key", `{"value":"n3w"}`,
			map[string]any{"GET /v1/secrets/openai-key": []any{200, v2}, "PUT /v1/secrets/openai-key": []any{201, api.Secret{ID: "sec_bbbbbbbbbbbbbbbbbbbb", Name: "openai-key", Version: 1}}},
			http.StatusConflict, "", []string{"GET /v1/secrets/openai-key", "PUT /v1/secrets/openai-key"}, ""},
		{"a get by name", "GET", "/e2b/secrets/openai-key", "",
			map[string]any{"GET /v1/secrets/openai-key": []any{200, v1}},
			http.StatusOK, e2bV1, []string{"GET /v1/secrets/openai-key"}, ""},
		{"a get by ID", "GET", "/e2b/secrets/" + secID, "",
			map[string]any{"GET /v1/secrets/" + secID: []any{200, v1}},
			http.StatusOK, e2bV1, []string{"GET /v1/secrets/" + secID}, ""},
		{"a get of what no secret may be named", "GET", "/e2b/secrets/..", "",
			nil, http.StatusNotFound, "", nil, ""},
		{"a get of an ID's prefix", "GET", "/e2b/secrets/sec_x", "",
			nil, http.StatusNotFound, "", nil, ""},
		{"a delete", "DELETE", "/e2b/secrets/openai-key", "",
			map[string]any{"DELETE /v1/secrets/openai-key": []any{204, nil}},
			http.StatusNoContent, "", []string{"DELETE /v1/secrets/openai-key"}, ""},
		{"a delete of what has no secret", "DELETE", "/e2b/secrets/missing", "",
			map[string]any{"DELETE /v1/secrets/missing": []any{404, notFound}},
			http.StatusNotFound, "", []string{"DELETE /v1/secrets/missing"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAPI{}
			for route, a := range tc.answers {
				a := a.([]any)
				f.answer(route, a[0].(int), a[1])
			}
			w := httptest.NewRecorder()
			New(f, Options{}).ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.answer != "" && strings.TrimSpace(w.Body.String()) != tc.answer {
				t.Errorf("answer %s, want %s", w.Body, tc.answer)
			}
			if w.Code >= 300 {
				var b body
				if json.Unmarshal(w.Body.Bytes(), &b) != nil || b.Code != w.Code || b.Message == "" {
					t.Errorf("error answer %s, want E2B's error body", w.Body)
				}
			}
			var calls []string
			for i, c := range f.calls {
				calls = append(calls, strings.Fields(c)[0]+" "+strings.Fields(c)[1])
				if tc.sent != "" && strings.HasPrefix(c, "PUT ") && strings.TrimSpace(f.bodies[i]) != tc.sent {
					t.Errorf("the PUT's body %s, want %s", f.bodies[i], tc.sent)
				}
			}
			if strings.Join(calls, "; ") != strings.Join(tc.calls, "; ") {
				t.Errorf("calls %q, want %q", calls, tc.calls)
			}
		})
	}
}

// TestSecretPages: E2B's pages of secrets are cut from warren's whole
// list, each starting after the last name of the one before, with
// X-Next-Token while more remain.
func TestSecretPages(t *testing.T) {
	f := &fakeAPI{}
	var all []api.Secret
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		all = append(all, api.Secret{ID: "sec_" + strings.Repeat(n, 20), Name: n, Version: 1})
	}
	f.answer("GET /v1/secrets", http.StatusOK, api.SecretList{Secrets: all})
	h := New(f, Options{})
	for _, tc := range []struct {
		query  string
		status int
		names  string
		next   string
	}{
		{"", 200, "a b c d e", ""},
		{"?limit=2", 200, "a b", "b"},
		{"?limit=2&nextToken=b", 200, "c d", "d"},
		{"?limit=2&nextToken=d", 200, "e", ""},
		{"?limit=2&nextToken=C", 200, "d e", ""}, // exactly the rest: no token
		{"?limit=5", 200, "a b c d e", ""},
		{"?nextToken=e", 200, "", ""},
		{"?limit=0", 400, "", ""},
		{"?limit=1001", 400, "", ""},
		{"?nextToken=a%20b", 400, "", ""},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/e2b/secrets"+tc.query, nil))
		if w.Code != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.query, w.Code, tc.status, w.Body)
			continue
		}
		if w.Code != http.StatusOK {
			continue
		}
		var got []secret
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got == nil {
			t.Errorf("%s: answer %s, want a JSON array: %v", tc.query, w.Body, err)
		}
		var names []string
		for _, s := range got {
			names = append(names, s.Name)
		}
		if strings.Join(names, " ") != tc.names || w.Header().Get("X-Next-Token") != tc.next {
			t.Errorf("%s: names %q and token %q, want %q and %q", tc.query, names, w.Header().Get("X-Next-Token"), tc.names, tc.next)
		}
	}
}
