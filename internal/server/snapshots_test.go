package server

import (
	"net/http"
	"strings"
	"testing"

	"warren/api"
)

// TestSnapshotNames: a snapshot taken with a name is found by it on every
// snapshot route and by ?name=, for its tenant only; a bad name is a 400
// saying why, a taken one a 409 naming its holder; a delete by name frees
// it.
func TestSnapshotNames(t *testing.T) {
	e := newTestEnv(t, deadAgent(t), Options{})
	var sb api.Sandbox
	e.call("POST", "/v1/sandboxes", e.keyA, "{}", http.StatusCreated, &sb)
	take := "/v1/sandboxes/" + sb.ID + "/snapshots"
	var first, named api.Snapshot
	e.call("POST", take, e.keyA, nil, http.StatusCreated, &first)
	e.call("POST", take, e.keyA, api.CreateSnapshotRequest{Name: "build-1"}, http.StatusCreated, &named)
	if named.Name != "build-1" || first.Name != "" {
		t.Fatalf("snapshots %+v and %+v, want the second named build-1", first, named)
	}

	for _, tc := range []struct{ name, why string }{
		{"sn-mine", `cannot start with "sn-"`},
		{"-x", "start with a letter or a digit"},
		{"a/b", "only letters"},
		{strings.Repeat("x", 64), "1 to 63"},
	} {
		got := apiError(t, e.do("POST", take, e.keyA, api.CreateSnapshotRequest{Name: tc.name}), http.StatusBadRequest, api.CodeBadRequest)
		if !strings.Contains(got.Message, tc.why) {
			t.Errorf("name %q: %q, want it to say %q", tc.name, got.Message, tc.why)
		}
	}
	got := apiError(t, e.do("POST", take, e.keyA, api.CreateSnapshotRequest{Name: "build-1"}), http.StatusConflict, api.CodeConflict)
	if !strings.Contains(got.Message, named.ID) {
		t.Errorf("a taken name: %q, want it to name %s", got.Message, named.ID)
	}

	t.Log("every snapshot route takes the name")
	var sn api.Snapshot
	e.call("GET", "/v1/snapshots/build-1", e.keyA, nil, http.StatusOK, &sn)
	if sn.ID != named.ID {
		t.Errorf("GET by name: %+v, want %s", sn, named.ID)
	}
	var lineage api.Lineage
	e.call("GET", "/v1/snapshots/build-1/lineage", e.keyA, nil, http.StatusOK, &lineage)
	if len(lineage.Ancestors) != 1 || lineage.Ancestors[0] != first.ID {
		t.Errorf("lineage by name: %v, want [%s]", lineage.Ancestors, first.ID)
	}
	var res api.RestoreResult
	e.call("POST", "/v1/snapshots/build-1/restore", e.keyA, nil, http.StatusCreated, &res)
	if len(res.Sandboxes) != 1 {
		t.Errorf("restore by name: %+v", res)
	}
	for _, path := range []string{"/v1/snapshots/build-1", "/v1/snapshots/build-1/lineage", "/v1/snapshots/nosuch"} {
		apiError(t, e.do("GET", path, e.keyB, nil), http.StatusNotFound, api.CodeNotFound)
	}
	apiError(t, e.do("POST", "/v1/snapshots/build-1/restore", e.keyB, nil), http.StatusNotFound, api.CodeNotFound)
	apiError(t, e.do("DELETE", "/v1/snapshots/build-1", e.keyB, nil), http.StatusNotFound, api.CodeNotFound)

	t.Log("?name= lists the one snapshot of that name, within the other filters")
	for _, tc := range []struct {
		path, key string
		want      []string
	}{
		{"/v1/snapshots?name=build-1", e.keyA, []string{named.ID}},
		{take + "?name=build-1", e.keyA, []string{named.ID}},
		{"/v1/snapshots?name=build-1&state=durable", e.keyA, []string{named.ID}},
		{"/v1/snapshots?name=build-1&state=failed", e.keyA, nil},
		{"/v1/snapshots?name=build-2", e.keyA, nil},
		{"/v1/snapshots?name=build-1", e.keyB, nil},
		{"/v1/snapshots", e.keyA, []string{first.ID, named.ID}},
	} {
		var list api.SnapshotList
		e.call("GET", tc.path, tc.key, nil, http.StatusOK, &list)
		var ids []string
		for _, sn := range list.Snapshots {
			ids = append(ids, sn.ID)
		}
		if strings.Join(ids, " ") != strings.Join(tc.want, " ") || list.NextPageToken != "" {
			t.Errorf("%s: %v (next %q), want %v", tc.path, ids, list.NextPageToken, tc.want)
		}
	}
	apiError(t, e.do("GET", "/v1/snapshots?name=sn-x", e.keyA, nil), http.StatusBadRequest, api.CodeBadRequest)
	var page api.SnapshotList
	e.call("GET", "/v1/snapshots?limit=1", e.keyA, nil, http.StatusOK, &page)
	apiError(t, e.do("GET", "/v1/snapshots?name=build-1&page_token="+page.NextPageToken, e.keyA, nil), http.StatusBadRequest, api.CodeBadRequest)

	t.Log("a delete by name frees it")
	e.call("DELETE", "/v1/snapshots/build-1", e.keyA, nil, http.StatusNoContent, nil)
	apiError(t, e.do("GET", "/v1/snapshots/"+named.ID, e.keyA, nil), http.StatusNotFound, api.CodeNotFound)
	var again api.Snapshot
	e.call("POST", take, e.keyA, api.CreateSnapshotRequest{Name: "build-1"}, http.StatusCreated, &again)
	e.call("GET", "/v1/snapshots/build-1", e.keyA, nil, http.StatusOK, &sn)
	if sn.ID != again.ID {
		t.Errorf("build-1 taken again is %s, want %s", sn.ID, again.ID)
	}
}
