package e2b

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"warren/api"
)

// TestSnapshotNames: E2B's snapshot calls with names become warren's: a
// named snapshot, listed with its name and filtered by it, created from
// and deleted by name; a name that is no snapshot of the caller's is a
// template's, and E2B's default template is never looked up as one.
func TestSnapshotNames(t *testing.T) {
	const snID = "sn-abcdefghijklmnopqrst"
	notFound := api.ErrorBody{Error: *api.Errorf(api.CodeNotFound, "snapshot not found")}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		answer                   string // "" for none checked
		calls                    []string
		sent                     string // the first call's body, when checked
	}{
		{"a named snapshot", "POST", "/e2b/sandboxes/" + sbID + "/snapshots", `{"name":"nightly"}`,
			http.StatusCreated, `{"names":["nightly"],"snapshotID":"` + snID + `"}`,
			[]string{"POST /v1/sandboxes/" + sbID + "/snapshots"}, `{"name":"nightly"}`},
		{"snapshots listed with their names, by name", "GET", "/e2b/snapshots?name=nightly&limit=5", "",
			http.StatusOK, `[{"names":["nightly"],"snapshotID":"` + snID + `"},{"names":[],"snapshotID":"sn-other"}]`,
			[]string{"GET /v1/snapshots?limit=5&name=nightly"}, ""},
		{"a create from a snapshot's name restores it", "POST", "/e2b/sandboxes", `{"templateID":"nightly"}`,
			http.StatusCreated, "",
			[]string{"GET /v1/snapshots/nightly", "POST /v1/snapshots/" + snID + "/restore", "PUT /v1/sandboxes/" + sbID + "/preview"}, ""},
		{"a create from a snapshot's ID restores it as it is", "POST", "/e2b/sandboxes", `{"templateID":"` + snID + `"}`,
			http.StatusCreated, "",
			[]string{"POST /v1/snapshots/" + snID + "/restore", "PUT /v1/sandboxes/" + sbID + "/preview"}, ""},
		{"a create from a name no snapshot has is a template's", "POST", "/e2b/sandboxes", `{"templateID":"py"}`,
			http.StatusCreated, "",
			[]string{"GET /v1/snapshots/py", "POST /v1/sandboxes", "PUT /v1/sandboxes/" + sbID + "/preview"}, ""},
		{"the default template is never a snapshot", "POST", "/e2b/sandboxes", `{"templateID":"base"}`,
			http.StatusCreated, "",
			[]string{"POST /v1/sandboxes", "PUT /v1/sandboxes/" + sbID + "/preview"}, ""},
		{"nor a name no snapshot may have", "POST", "/e2b/sandboxes", `{"templateID":"py:3.12"}`,
			http.StatusCreated, "",
			[]string{"POST /v1/sandboxes", "PUT /v1/sandboxes/" + sbID + "/preview"}, ""},
		{"a delete by a snapshot's name", "DELETE", "/e2b/templates/nightly", "",
			http.StatusNoContent, "",
			[]string{"GET /v1/snapshots/nightly", "DELETE /v1/snapshots/" + snID}, ""},
		{"a delete by a snapshot's ID", "DELETE", "/e2b/templates/" + snID, "",
			http.StatusNoContent, "",
			[]string{"DELETE /v1/snapshots/" + snID}, ""},
		{"what has the prefix of an ID but not its form is no snapshot", "DELETE", "/e2b/templates/sn-x", "",
			http.StatusNotFound, "",
			[]string{"DELETE /v1/snapshots/sn-x"}, ""},
		{"a delete of a name no snapshot has is a template's", "DELETE", "/e2b/templates/py", "",
			http.StatusNoContent, "",
			[]string{"GET /v1/snapshots/py", "DELETE /v1/templates/py"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeAPI{}
			named := api.Snapshot{ID: snID, Name: "nightly"}
			f.answer("POST /v1/sandboxes/"+sbID+"/snapshots", http.StatusCreated, named)
			f.answer("GET /v1/snapshots", http.StatusOK, api.SnapshotList{Snapshots: []api.Snapshot{named, {ID: "sn-other"}}})
			f.answer("GET /v1/snapshots/nightly", http.StatusOK, named)
			f.answer("GET /v1/snapshots/py", http.StatusNotFound, notFound)
			f.answer("POST /v1/snapshots/"+snID+"/restore", http.StatusCreated, api.RestoreResult{Sandboxes: []api.Sandbox{{ID: sbID}}})
			f.answer("POST /v1/sandboxes", http.StatusCreated, api.Sandbox{ID: sbID})
			f.answer("PUT /v1/sandboxes/"+sbID+"/preview", http.StatusOK, api.Preview{})
			f.answer("DELETE /v1/snapshots/"+snID, http.StatusNoContent, nil)
			f.answer("DELETE /v1/snapshots/sn-x", http.StatusNotFound, notFound)
			f.answer("DELETE /v1/templates/py", http.StatusNoContent, nil)
			w := httptest.NewRecorder()
			New(f, Options{}).ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.answer != "" && strings.TrimSpace(w.Body.String()) != tc.answer {
				t.Errorf("answer %s, want %s", w.Body, tc.answer)
			}
			var calls []string
			for _, c := range f.calls {
				calls = append(calls, strings.Fields(c)[0]+" "+strings.Fields(c)[1])
			}
			if strings.Join(calls, "; ") != strings.Join(tc.calls, "; ") {
				t.Errorf("calls %q, want %q", calls, tc.calls)
			}
			if tc.sent != "" && strings.TrimSpace(f.bodies[0]) != tc.sent {
				t.Errorf("the first call's body %s, want %s", f.bodies[0], tc.sent)
			}
		})
	}
}
