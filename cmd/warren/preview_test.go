package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"warren/api"
)

// The fake's preview routes: every sandbox starts private with token
// "tok-ID"; a rotation appends "+".

func (f *fakeWarren) previewOf(id string) api.Preview {
	p, ok := f.previews[id]
	if !ok {
		p = api.Preview{Token: "tok-" + id}
	}
	if f.previewDomain != "" {
		u := "https://{port}-" + id + "." + f.previewDomain + "/"
		p.URL = &u
	}
	return p
}

func (f *fakeWarren) getPreview(w http.ResponseWriter, r *http.Request, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answer(w, http.StatusOK, f.previewOf(id))
}

func (f *fakeWarren) setPreview(w http.ResponseWriter, r *http.Request, id string) {
	var req api.SetPreviewRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.previewOf(id)
	if req.Public != nil {
		p.Public = *req.Public
	}
	if req.RotateToken {
		p.Token += "+"
	}
	if f.previews == nil {
		f.previews = map[string]api.Preview{}
	}
	f.previews[id] = p
	answer(w, http.StatusOK, p)
}

func TestPreviewCommand(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID

	code, stdout, stderr := runCLI(t, nil, "preview", id)
	want := "access: private (the token is needed)\ntoken:  tok-" + id + "\nurl:    none: the server has no preview domain (use warren port-url)\n"
	if code != 0 || stdout != want {
		t.Errorf("preview: exit %d stdout %q stderr %q, want %q", code, stdout, stderr, want)
	}
	f.with(func() { f.previewDomain = "preview.example.com" })
	code, stdout, _ = runCLI(t, nil, "preview", "--public", "--rotate", id)
	if code != 0 || !strings.Contains(stdout, "access: public\n") || !strings.Contains(stdout, "token:  tok-"+id+"+\n") ||
		!strings.Contains(stdout, "url:    https://{port}-"+id+".preview.example.com/\n") {
		t.Errorf("preview --public --rotate: exit %d stdout %q", code, stdout)
	}
	var p api.Preview
	if code, stdout, _ := runCLI(t, nil, "preview", "--json", "--private", id); code != 0 || json.Unmarshal([]byte(stdout), &p) != nil || p.Public {
		t.Errorf("preview --json --private: exit %d stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "preview", "--public", "--private", id); code != 2 || !strings.Contains(stderr, "usage: warren preview") {
		t.Errorf("--public --private: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "preview", "sb-nope"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("unknown sandbox: exit %d stderr %q", code, stderr)
	}
}

func TestPortURLCommand(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{}).ID
	// No preview domain: the API's URL of the port.
	code, stdout, _ := runCLI(t, nil, "port-url", id, "8080")
	if want := os.Getenv("WARREN_URL") + "/v1/sandboxes/" + id + "/ports/8080/\n"; code != 0 || stdout != want {
		t.Errorf("port-url without a preview domain: exit %d stdout %q, want %q", code, stdout, want)
	}
	f.with(func() { f.previewDomain = "preview.example.com" })
	base := "https://8080-" + id + ".preview.example.com/"
	if code, stdout, _ := runCLI(t, nil, "port-url", id, "8080"); code != 0 || stdout != base+"?warren_token=tok-"+id+"\n" {
		t.Errorf("private port-url: exit %d stdout %q", code, stdout)
	}
	if code, stdout, _ := runCLI(t, nil, "port-url", "--no-token", id, "8080"); code != 0 || stdout != base+"\n" {
		t.Errorf("port-url --no-token: exit %d stdout %q", code, stdout)
	}
	runCLI(t, nil, "preview", "--public", "--rotate", id)
	if code, stdout, _ := runCLI(t, nil, "port-url", id, "8080"); code != 0 || stdout != base+"\n" {
		t.Errorf("public port-url: exit %d stdout %q", code, stdout)
	}
	for _, port := range []string{"0", "65536", "080", "http"} {
		if code, _, stderr := runCLI(t, nil, "port-url", id, port); code != 2 || !strings.Contains(stderr, "bad port") {
			t.Errorf("port %s: exit %d stderr %q", port, code, stderr)
		}
	}
}
