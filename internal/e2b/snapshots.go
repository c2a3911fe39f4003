package e2b

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"warren/api"
	"warren/internal/ident"
)

// E2B's snapshots are templates: a snapshot's ID, or its name, is what
// E2B's create takes as its template, and what its DELETE /templates/{id}
// deletes. Its names are warren's snapshot names (api.CheckSnapshotName),
// one a snapshot at most.

// snapshotOf returns the snapshot that E2B's template ref is: ref itself
// when it has the form of a snapshot's ID (whether there is one is the
// route's to answer), or the ID of the caller's snapshot named ref; ok is
// false when ref is no snapshot of the caller's, and so a template's name.
// E2B's names of warren's default template are never a snapshot's.
func (h *Handler) snapshotOf(r *http.Request, ref string) (id string, ok bool, err error) {
	switch {
	case ident.Valid(ref, api.SnapshotIDPrefix):
		return ref, true, nil
	case template(ref) == "default" || api.CheckSnapshotName(ref) != nil:
		return "", false, nil
	}
	var sn api.Snapshot
	err = h.call(r, "GET", "/v1/snapshots/"+ref, nil, &sn)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return sn.ID, true, nil
}

// names is a snapshot's names as E2B lists them.
func names(sn api.Snapshot) []string {
	if sn.Name == "" {
		return []string{}
	}
	return []string{sn.Name}
}

// snapshot serves POST /sandboxes/{id}/snapshots {"name"}: a snapshot of
// warren's, named as asked, whose ID or name creates sandboxes as E2B's
// snapshot templates do.
func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request, id string) error {
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	p, err := sandboxPath(id)
	if err != nil {
		return err
	}
	var snap api.Snapshot
	if err := h.call(r, "POST", p+"/snapshots", api.CreateSnapshotRequest{Name: req.Name}, &snap); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, map[string]any{"snapshotID": snap.ID, "names": names(snap)})
	return nil
}

// listSnapshots serves GET /snapshots?sandboxID=&name=&limit=&nextToken=.
func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := "/v1/snapshots"
	if sid := q.Get("sandboxID"); sid != "" {
		sp, err := sandboxPath(sid)
		if err != nil {
			return err
		}
		p = sp + "/snapshots"
	}
	wq := pageQuery(q, 0)
	if name := q.Get("name"); name != "" {
		wq.Set("name", name)
	}
	var list api.SnapshotList
	if err := h.call(r, "GET", p+"?"+wq.Encode(), nil, &list); err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(list.Snapshots))
	for _, s := range list.Snapshots {
		out = append(out, map[string]any{"snapshotID": s.ID, "names": names(s)})
	}
	if list.NextPageToken != "" {
		w.Header().Set("X-Next-Token", list.NextPageToken)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteTemplate serves DELETE /templates/{ref}: a snapshot of the
// caller's by ID or name, which is how E2B's SDKs delete snapshots, or
// else every version of the caller's template ref.
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request, ref string) error {
	id, ok, err := h.snapshotOf(r, ref)
	if err != nil {
		return err
	}
	path := "/v1/templates/" + url.PathEscape(ref)
	if ok || strings.HasPrefix(ref, api.SnapshotIDPrefix) {
		path = "/v1/snapshots/" + url.PathEscape(cmp.Or(id, ref)) // no such snapshot: 404
	}
	if err := h.call(r, http.MethodDelete, path, nil, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
