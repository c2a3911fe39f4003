package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"warren/api"
	"warren/client"
)

// TestKeyCommands: an admin makes, lists and revokes tenants' keys; a key
// works for its tenant until it is revoked.
func TestKeyCommands(t *testing.T) {
	w := newWarren(t)
	if code, _, stderr := runCLI(t, nil, "key", "create", "bob"); code != 1 || !strings.Contains(stderr, "needs an admin key") {
		t.Errorf("key create with a tenant's key: exit %d stderr %q", code, stderr)
	}
	w.asAdmin()
	code, stdout, stderr := runCLI(t, nil, "key", "create", "bob")
	key := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(key, "wk_") || stdout != key+"\n" {
		t.Fatalf("key create: exit %d stdout %q stderr %q, want the key alone", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "key", "create", "Not A Tenant!"); code != 1 || stderr == "" {
		t.Errorf("key create of a bad tenant name: exit %d stderr %q, want a refusal", code, stderr)
	}

	code, stdout, _ = runCLI(t, nil, "key", "ls")
	row := regexp.MustCompile(`(?m)^(key-\S+) +bob +false +`).FindStringSubmatch(stdout)
	if code != 0 || !strings.HasPrefix(stdout, "ID ") || row == nil || strings.Contains(stdout, key) {
		t.Fatalf("key ls: exit %d stdout %q, want bob's key listed, never shown", code, stdout)
	}
	var keys []api.KeyInfo
	if code, stdout, _ := runCLI(t, nil, "key", "ls", "--json"); code != 0 || json.Unmarshal([]byte(stdout), &keys) != nil || len(keys) != 3 {
		t.Errorf("key ls --json: exit %d stdout %q, want the three keys", code, stdout)
	}

	// The new key is bob's: it sees none of acme's sandboxes.
	w.sandbox(api.CreateSandboxRequest{})
	t.Setenv(client.EnvAPIKey, key)
	if code, stdout, stderr := runCLI(t, nil, "ls"); code != 0 || strings.Count(stdout, "\n") != 1 {
		t.Errorf("ls with bob's key: exit %d stdout %q stderr %q, want the header alone", code, stdout, stderr)
	}
	w.asAdmin()
	if code, _, stderr := runCLI(t, nil, "key", "rm", row[1]); code != 0 {
		t.Errorf("key rm: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "key", "rm", row[1]); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("key rm of a revoked key: exit %d stderr %q", code, stderr)
	}
	t.Setenv(client.EnvAPIKey, key)
	if code, _, stderr := runCLI(t, nil, "ls"); code != 1 || stderr == "" {
		t.Errorf("ls with a revoked key: exit %d stderr %q, want a refusal", code, stderr)
	}
}

// TestKeyRemoveRotatesAgentTokens (issue 35, row 9): key rm
// --rotate-agent-tokens also gives every sandbox of the key's tenant a new
// agent token, and the old one opens nothing.
func TestKeyRemoveRotatesAgentTokens(t *testing.T) {
	w := newWarren(t)
	sb := w.sandbox(api.CreateSandboxRequest{})
	w.asAdmin()
	if code, _, stderr := runCLI(t, nil, "key", "create", tenant); code != 0 {
		t.Fatalf("key create: exit %d stderr %q", code, stderr)
	}
	var id string
	var keys []api.KeyInfo
	if _, stdout, _ := runCLI(t, nil, "key", "ls", "--json"); json.Unmarshal([]byte(stdout), &keys) == nil {
		for _, k := range keys {
			if k.Tenant == tenant && id == "" {
				id = k.ID
			}
		}
	}
	if code, stdout, stderr := runCLI(t, nil, "key", "rm", "--rotate-agent-tokens", id); code != 0 || !strings.Contains(stdout, "new agent tokens for 1 sandboxes of "+tenant) {
		t.Fatalf("key rm --rotate-agent-tokens: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	after := w.get(sb.ID)
	if after.AgentToken == "" || after.AgentToken == sb.AgentToken {
		t.Errorf("agent token %q after the rotation; want a new one (was %q)", after.AgentToken, sb.AgentToken)
	}
	for token, want := range map[string]int{sb.AgentToken: http.StatusUnauthorized, after.AgentToken: http.StatusNoContent} {
		req, _ := http.NewRequest("GET", w.url+"/v1/sandboxes/"+sb.ID+"/agent/health", nil)
		req.Header.Set("X-Access-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("health with token %.8s…: %d, want %d", token, resp.StatusCode, want)
		}
	}
}
