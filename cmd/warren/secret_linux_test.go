package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"warren/api"
)

// TestSecretCommands: a tenant sets, lists, shows and deletes its secrets;
// the value goes in on stdin and never comes out.
func TestSecretCommands(t *testing.T) {
	w := newWarren(t)
	const value, value2 = "sk-first-value", "sk-second-value"
	var all strings.Builder // everything the commands printed
	cli := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, []byte(stdin), args...)
		all.WriteString(stdout + stderr)
		return code, stdout, stderr
	}
	resolve := func(name string) string {
		t.Helper()
		v, err := w.Secrets.Resolve(context.Background(), "", tenant, []string{name})
		if err != nil {
			t.Fatalf("resolve %s: %v", name, err)
		}
		return v[name]
	}

	code, stdout, stderr := cli(value+"\n", "secret", "set", "OpenAI-Key", "--meta", "team=ml")
	m := regexp.MustCompile(`^openai-key (sec_\S+) version 1\n$`).FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("secret set: exit %d stdout %q stderr %q, want its name, ID and version 1", code, stdout, stderr)
	}
	id := m[1]
	if got := resolve("openai-key"); got != value {
		t.Errorf("stored value %q, want %q (one trailing newline dropped)", got, value)
	}
	// A new version; metadata not given is kept; a CRLF is dropped whole.
	if code, stdout, stderr := cli(value2+"\r\n", "secret", "set", "openai-key"); code != 0 || stdout != "openai-key "+id+" version 2\n" {
		t.Errorf("secret set again: exit %d stdout %q stderr %q, want version 2 of %s", code, stdout, stderr, id)
	}
	if got := resolve("openai-key"); got != value2 {
		t.Errorf("stored value %q, want %q", got, value2)
	}
	// One newline is dropped, no more: the rest is the value's, which
	// HTTP headers cannot carry.
	if code, _, stderr := cli("v \n\n", "secret", "set", "spaced"); code != 1 || !strings.Contains(stderr, "CR, LF or NUL") {
		t.Errorf("secret set of a value with a newline in it: exit %d stderr %q, want the server's refusal", code, stderr)
	}

	for _, tt := range []struct {
		stdin, want string
	}{
		{"", "is empty"},
		{"\n", "is empty"},
		{strings.Repeat("x", api.MaxSecretBytes+1), "over 16384 bytes"},
	} {
		if code, _, stderr := cli(tt.stdin, "secret", "set", "empty"); code != 1 || !strings.Contains(stderr, tt.want) {
			t.Errorf("secret set with stdin of %d bytes: exit %d stderr %q, want %q", len(tt.stdin), code, stderr, tt.want)
		}
	}
	if code, _, stderr := cli("v", "secret", "set", "Not A Name!"); code != 1 || !strings.Contains(stderr, "bad secret name") {
		t.Errorf("secret set of a bad name: exit %d stderr %q, want the server's refusal", code, stderr)
	}
	// The value is never an argument.
	if code, _, stderr := cli("", "secret", "set", "other", value); code != 2 || !strings.Contains(stderr, "usage: warren secret set") {
		t.Errorf("secret set NAME VALUE: exit %d stderr %q, want the usage", code, stderr)
	}
	if code, stdout, _ := cli("", "help", "secret", "set"); code != 0 || !strings.Contains(stdout, "never from the command line") {
		t.Errorf("help secret set: exit %d stdout %q, want it to say the value comes from stdin", code, stdout)
	}

	code, stdout, _ = cli("", "secret", "ls")
	if code != 0 || !regexp.MustCompile(`^NAME +ID +VERSION +UPDATED\nopenai-key +`+id+` +2 +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n$`).MatchString(stdout) {
		t.Errorf("secret ls: exit %d stdout %q, want the one secret", code, stdout)
	}
	var list []api.Secret
	if code, stdout, _ := cli("", "secret", "ls", "--json"); code != 0 || json.Unmarshal([]byte(stdout), &list) != nil || len(list) != 1 || list[0].ID != id {
		t.Errorf("secret ls --json: exit %d stdout %q", code, stdout)
	}
	for _, ref := range []string{"OPENAI-KEY", id} {
		code, stdout, stderr := cli("", "secret", "get", ref)
		if code != 0 || !strings.HasPrefix(stdout, "name      openai-key\nid        "+id+"\nversion   2\n") || !strings.HasSuffix(stdout, "meta      team=ml\n") {
			t.Errorf("secret get %s: exit %d stdout %q stderr %q", ref, code, stdout, stderr)
		}
	}
	var got api.Secret
	if code, stdout, _ := cli("", "secret", "get", "--json", "openai-key"); code != 0 || json.Unmarshal([]byte(stdout), &got) != nil ||
		got.Version != 2 || got.Metadata["team"] != "ml" {
		t.Errorf("secret get --json: exit %d stdout %q", code, stdout)
	}

	if code, _, stderr := cli("", "secret", "rm", "openai-key"); code != 0 {
		t.Errorf("secret rm: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := cli("", "secret", "rm", "openai-key"); code != 1 || !strings.Contains(stderr, "no secret openai-key") {
		t.Errorf("secret rm again: exit %d stderr %q, want not found", code, stderr)
	}
	if code, _, stderr := cli("", "secret", "get", id); code != 1 || !strings.Contains(stderr, "no secret") {
		t.Errorf("secret get of a deleted secret: exit %d stderr %q, want not found", code, stderr)
	}
	if code, stdout, _ := cli("", "secret", "ls"); code != 0 || stdout != "NAME  ID  VERSION  UPDATED\n" {
		t.Errorf("secret ls after rm: exit %d stdout %q, want the header alone", code, stdout)
	}
	if strings.Contains(all.String(), "sk-") {
		t.Errorf("a command printed a value: %q", all.String())
	}
}

// TestNetworkRules: --rule on create, restore and network becomes the
// policy's rules, which the API keeps and `warren network` shows. The
// test's node has no sandbox networking, so the rules ride along a policy
// of no egress: what they do to requests is the end-to-end suite's.
func TestNetworkRules(t *testing.T) {
	w := newWarren(t)
	if code, _, stderr := runCLI(t, []byte("sk-1"), "secret", "set", "openai"); code != 0 {
		t.Fatalf("secret set: exit %d stderr %q", code, stderr)
	}
	rule := func(dest string, headers map[string]string) map[string][]api.NetworkRule {
		return map[string][]api.NetworkRule{dest: {{Transform: &api.Transform{Headers: headers}}}}
	}

	code, stdout, stderr := runCLI(t, nil, "create", "--no-egress",
		"--rule", "api.openai.com:Authorization=Bearer ${secrets.openai}", "--rule", "api.openai.com:X-Org=acme")
	if code != 0 {
		t.Fatalf("create --rule: exit %d stderr %q", code, stderr)
	}
	id := strings.TrimSpace(stdout)
	want := rule("api.openai.com", map[string]string{"Authorization": "Bearer ${secrets.openai}", "X-Org": "acme"})
	if sb := w.get(id); !sb.Network.None || !equalJSON(sb.Network.Rules, want) {
		t.Errorf("create --rule made %+v, want no egress and the rules %+v", sb.Network, want)
	}
	code, stdout, _ = runCLI(t, nil, "network", id)
	if wantOut := "egress    none\nrule      api.openai.com:Authorization=Bearer ${secrets.openai}\nrule      api.openai.com:X-Org=acme\nrefused"; code != 0 || !strings.Contains(stdout, wantOut) {
		t.Errorf("network: exit %d stdout %q, want %q", code, stdout, wantOut)
	}

	// network replaces the policy whole: the new rule alone, then none.
	code, stdout, stderr = runCLI(t, nil, "network", id, "--no-egress", "--rule", "*.example.com:X-Key=${e2b.secrets.openai}")
	if code != 0 || !strings.Contains(stdout, "rule      *.example.com:X-Key=${e2b.secrets.openai}\nrefused") || strings.Contains(stdout, "api.openai.com") {
		t.Errorf("network --rule: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if st, err := w.Manager.Network(context.Background(), tenant, id); err != nil || !equalJSON(st.Policy.Rules, rule("*.example.com", map[string]string{"X-Key": "${e2b.secrets.openai}"})) {
		t.Errorf("after network --rule: %+v, %v", st.Policy, err)
	}
	if code, stdout, _ = runCLI(t, nil, "network", id, "--no-egress"); code != 0 || strings.Contains(stdout, "rule") {
		t.Errorf("network --no-egress: exit %d stdout %q, want no rules", code, stdout)
	}

	// A restore takes them too.
	sn, err := w.Manager.Snapshot(context.Background(), tenant, id, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, nil, "restore", sn.ID, "--no-egress", "--rule", "api.openai.com:Authorization=Bearer ${secrets.openai}")
	if code != 0 {
		t.Fatalf("restore --rule: exit %d stderr %q", code, stderr)
	}
	if sb := w.get(strings.TrimSpace(stdout)); !equalJSON(sb.Network.Rules, rule("api.openai.com", map[string]string{"Authorization": "Bearer ${secrets.openai}"})) {
		t.Errorf("restore --rule made %+v", sb.Network)
	}

	// A rule naming a secret the tenant does not have is refused, naming it.
	if code, _, stderr := runCLI(t, nil, "create", "--no-egress", "--rule", "a.example.com:X-Key=${secrets.nope}"); code != 1 || !strings.Contains(stderr, `"nope"`) {
		t.Errorf("create --rule naming no secret: exit %d stderr %q, want the server's refusal naming it", code, stderr)
	}
	for _, arg := range []string{"api.openai.com", "api.openai.com:Authorization"} {
		if code, _, stderr := runCLI(t, nil, "create", "--rule", arg); code != 2 || !strings.Contains(stderr, "DEST:HEADER=VALUE") {
			t.Errorf("create --rule %q: exit %d stderr %q, want the usage", arg, code, stderr)
		}
	}
}

// equalJSON reports whether a and b are the same in JSON.
func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
