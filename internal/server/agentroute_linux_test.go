//go:build linux

package server

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warren/api"
)

// agentRequest sends a request of the agent routes with the headers given
// ("" values left out) and answers the status and body.
func (e *testEnv) agentRequest(method, path string, header map[string]string, body io.Reader) (int, string, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// The agent routes open with the sandbox's own agent token or an API key
// of its tenant, and with nothing else: not another sandbox's token, not
// another tenant's key, never the agent's control service.
func TestAgentRouteAccess(t *testing.T) {
	e, path := newAgentEnv(t, Options{})
	var sb, other api.Sandbox
	e.call("GET", path, e.keyA, nil, http.StatusOK, &sb)
	e.call("POST", "/v1/sandboxes", e.keyA, "{}", http.StatusCreated, &other)
	if sb.AgentToken == "" || sb.AgentToken == other.AgentToken {
		t.Fatalf("agent tokens %q and %q, want two of their own", sb.AgentToken, other.AgentToken)
	}
	list1 := `{}`
	for _, tc := range []struct {
		name   string
		path   string
		header map[string]string
		want   int
	}{
		{"its token", "/health", map[string]string{"X-Access-Token": sb.AgentToken}, http.StatusNoContent},
		{"its tenant's key", "/health", map[string]string{"X-API-Key": e.keyA}, http.StatusNoContent},
		{"nothing", "/health", nil, http.StatusUnauthorized},
		{"a wrong token", "/health", map[string]string{"X-Access-Token": "x" + sb.AgentToken}, http.StatusUnauthorized},
		{"another sandbox's token", "/health", map[string]string{"X-Access-Token": other.AgentToken}, http.StatusUnauthorized},
		{"another tenant's key", "/health", map[string]string{"X-API-Key": e.keyB}, http.StatusNotFound},
		{"a key with a Basic user", "/health", map[string]string{"X-API-Key": e.keyA, "Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))}, http.StatusUnauthorized},
		{"the control service", "/control.Control/Shutdown", map[string]string{"X-Access-Token": sb.AgentToken, "Content-Type": "application/json"}, http.StatusNotFound},
		{"the control service past a service", "/process.Process%2F..%2Fcontrol.Control%2FShutdown", map[string]string{"X-Access-Token": sb.AgentToken, "Content-Type": "application/json"}, http.StatusNotFound},
		{"a process call", "/process.Process/List", map[string]string{"X-Access-Token": sb.AgentToken, "Content-Type": "application/json"}, http.StatusOK},
	} {
		status, body, _ := e.agentRequest("POST", path+"/agent"+tc.path, tc.header, strings.NewReader(list1))
		if tc.path == "/health" {
			status, body, _ = e.agentRequest("GET", path+"/agent"+tc.path, tc.header, nil)
		}
		if status != tc.want {
			t.Errorf("%s: %s answered %d %s, want %d", tc.name, tc.path, status, body, tc.want)
		}
	}
}

// A Connect call passes through both ways, streaming, as the agent
// answers it, and runs as the user envd's Basic header names; the agent's
// cookies and other headers stay behind.
func TestAgentRouteForwards(t *testing.T) {
	e, path := newAgentEnv(t, Options{})
	var sb api.Sandbox
	e.call("GET", path, e.keyA, nil, http.StatusOK, &sb)
	start := `{"process":{"cmd":"id","args":["-un"]}}`
	var envelope bytes.Buffer
	envelope.Write([]byte{0, 0, 0, 0, byte(len(start))})
	envelope.WriteString(start)
	status, body, h := e.agentRequest("POST", path+"/agent/process.Process/Start", map[string]string{
		"X-Access-Token": sb.AgentToken,
		"Content-Type":   "application/connect+json",
		"Authorization":  "Basic " + base64.StdEncoding.EncodeToString([]byte("nobody:")),
	}, &envelope)
	if status != http.StatusOK || h.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("Start answered %d (%s): %q", status, h.Get("Content-Type"), body)
	}
	// The events are Connect envelopes: the stdout one holds "nobody\n"
	// in base64, and the end one exit code 0 (left out as a zero).
	if !strings.Contains(body, base64.StdEncoding.EncodeToString([]byte("nobody\n"))) || !strings.Contains(body, `"end"`) {
		t.Errorf("Start's events %q: want nobody's output and an end", body)
	}
	if h.Get("Set-Cookie") != "" {
		t.Errorf("the agent's Set-Cookie reached the caller")
	}
}

// envd's /files: an upload of one body and of several multipart parts,
// each to its whole path, a download, envd's error body for a missing
// file, and metadata refused.
func TestAgentRouteFiles(t *testing.T) {
	e, path := newAgentEnv(t, Options{})
	var sb api.Sandbox
	e.call("GET", path, e.keyA, nil, http.StatusOK, &sb)
	dir := t.TempDir()
	tok := map[string]string{"X-Access-Token": sb.AgentToken, "Content-Type": "application/octet-stream"}
	one := filepath.Join(dir, "one.txt")
	status, body, _ := e.agentRequest("POST", path+"/agent/files?path="+one, tok, strings.NewReader("first"))
	if status != http.StatusOK || !strings.Contains(body, `"path":"`+one+`"`) {
		t.Fatalf("upload: %d %s", status, body)
	}

	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for _, name := range []string{"a/x.txt", "b/y.txt"} {
		w, _ := mw.CreateFormFile("file", filepath.Join(dir, name))
		io.WriteString(w, name)
	}
	mw.Close()
	status, body, _ = e.agentRequest("POST", path+"/agent/files", map[string]string{"X-Access-Token": sb.AgentToken, "Content-Type": mw.FormDataContentType()}, &form)
	var entries []envdFileEntry
	if status != http.StatusOK || json.Unmarshal([]byte(body), &entries) != nil || len(entries) != 2 {
		t.Fatalf("multipart upload: %d %s", status, body)
	}
	for _, name := range []string{"a/x.txt", "b/y.txt"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != name {
			t.Errorf("%s holds %q, %v", name, b, err)
		}
	}

	status, body, _ = e.agentRequest("GET", path+"/agent/files?path="+one, tok, nil)
	if status != http.StatusOK || body != "first" {
		t.Errorf("download: %d %q", status, body)
	}

	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, "unzipped")
	zw.Close()
	gz := filepath.Join(dir, "gz.txt")
	status, body, _ = e.agentRequest("POST", path+"/agent/files?path="+gz, map[string]string{
		"X-Access-Token": sb.AgentToken, "Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}, &zipped)
	if b, err := os.ReadFile(gz); status != http.StatusOK || err != nil || string(b) != "unzipped" {
		t.Errorf("gzip upload: %d %s; the file holds %q (%v)", status, body, b, err)
	}
	status, body, _ = e.agentRequest("GET", path+"/agent/files?path="+filepath.Join(dir, "missing"), tok, nil)
	var eb envdError
	if status != http.StatusNotFound || json.Unmarshal([]byte(body), &eb) != nil || eb.Code != 404 || eb.Message == "" {
		t.Errorf("missing file: %d %s, want envd's 404 body", status, body)
	}
	tok["X-Metadata-Owner"] = "me"
	status, body, _ = e.agentRequest("POST", path+"/agent/files?path="+one, tok, strings.NewReader("x"))
	if status != http.StatusBadRequest || !strings.Contains(body, "metadata") {
		t.Errorf("metadata upload: %d %s, want 400", status, body)
	}
}
