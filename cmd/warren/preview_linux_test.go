package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"warren/api"
	"warren/internal/server"
)

func TestPreviewCommand(t *testing.T) {
	w := newWarren(t)
	ctx := context.Background()
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	p, err := w.Manager.Preview(ctx, tenant, id)
	if err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runCLI(t, nil, "preview", id)
	want := "access: private (the token is needed)\ntoken:  " + p.Token + "\nurl:    none: the server has no preview domain (use warren port-url)\n"
	if code != 0 || stdout != want {
		t.Errorf("preview: exit %d stdout %q stderr %q, want %q", code, stdout, stderr, want)
	}
	newWarrenWith(t, w.Harness, server.Options{PreviewDomain: "preview.example.com"})
	code, stdout, _ = runCLI(t, nil, "preview", "--public", "--rotate", id)
	rotated, err := w.Manager.Preview(ctx, tenant, id)
	if err != nil || !rotated.Public || rotated.Token == p.Token {
		t.Fatalf("after --public --rotate: %+v, %v; want public with a new token", rotated, err)
	}
	if code != 0 || !strings.Contains(stdout, "access: public\n") || !strings.Contains(stdout, "token:  "+rotated.Token+"\n") ||
		!strings.Contains(stdout, "url:    https://{port}-"+id+".preview.example.com/\n") {
		t.Errorf("preview --public --rotate: exit %d stdout %q", code, stdout)
	}
	var got api.Preview
	if code, stdout, _ := runCLI(t, nil, "preview", "--json", "--private", id); code != 0 || json.Unmarshal([]byte(stdout), &got) != nil || got.Public || got.Token != rotated.Token {
		t.Errorf("preview --json --private: exit %d stdout %q", code, stdout)
	}
	if p, err := w.Manager.Preview(ctx, tenant, id); err != nil || p.Public {
		t.Errorf("after --private: %+v, %v; want private", p, err)
	}
	if code, _, stderr := runCLI(t, nil, "preview", "--public", "--private", id); code != 2 || !strings.Contains(stderr, "usage: warren preview") {
		t.Errorf("--public --private: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "preview", "sb-nope"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("unknown sandbox: exit %d stderr %q", code, stderr)
	}
}

func TestPortURLCommand(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	// No preview domain: the API's URL of the port.
	code, stdout, _ := runCLI(t, nil, "port-url", id, "8080")
	if want := os.Getenv("WARREN_URL") + "/v1/sandboxes/" + id + "/ports/8080/\n"; code != 0 || stdout != want {
		t.Errorf("port-url without a preview domain: exit %d stdout %q, want %q", code, stdout, want)
	}
	newWarrenWith(t, w.Harness, server.Options{PreviewDomain: "preview.example.com"})
	p, err := w.Manager.Preview(context.Background(), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	base := "https://8080-" + id + ".preview.example.com/"
	if code, stdout, _ := runCLI(t, nil, "port-url", id, "8080"); code != 0 || stdout != base+"?warren_token="+p.Token+"\n" {
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
