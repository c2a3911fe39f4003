package main

import (
	"context"
	"strings"
	"testing"

	"warren/api"
)

// The test's node has no sandbox networking (its sandboxes have loopback
// only): the one policy it takes is no egress, and it says so for any other.

func TestNetworkFlagsOnCreate(t *testing.T) {
	w := newWarren(t)
	code, stdout, stderr := runCLI(t, nil, "create", "--no-egress")
	if code != 0 {
		t.Fatalf("create --no-egress: exit %d: %s", code, stderr)
	}
	if sb := w.get(strings.TrimSpace(stdout)); !sb.Network.None {
		t.Errorf("create --no-egress made %+v, want no egress", sb.Network)
	}
	code, stdout, stderr = runCLI(t, nil, "create")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, stderr)
	}
	if sb := w.get(strings.TrimSpace(stdout)); sb.Network.None || sb.Network.Allow != nil || sb.Network.Deny != nil {
		t.Errorf("create without network flags made %+v, want the default", sb.Network)
	}
	if code, _, stderr := runCLI(t, nil, "create", "--allow", "pypi.org"); code != 1 || !strings.Contains(stderr, "no sandbox networking") {
		t.Errorf("create --allow: exit %d stderr %q, want the server's refusal", code, stderr)
	}
}

func TestNetworkCommand(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	// A policy of a node with networking, recorded as such a node would.
	if err := w.Deps.Store.SetSandboxNetwork(context.Background(), id, api.NetworkPolicy{Allow: []string{"pypi.org"}, Deny: []string{"10.1.2.3"}}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, nil, "network", id)
	if want := "address   10.0.2.15 (gateway and DNS 10.0.2.2)\negress    only pypi.org\ndenied    10.1.2.3\nrefused   0 (rate limited 0)\n"; code != 0 || stdout != want {
		t.Errorf("network: exit %d stdout %q stderr %q, want %q", code, stdout, stderr, want)
	}
	if code, stdout, _ = runCLI(t, nil, "network", "--no-egress", id); code != 0 || !strings.Contains(stdout, "egress    none\n") {
		t.Errorf("network --no-egress: exit %d stdout %q", code, stdout)
	}
	if st, err := w.Manager.Network(context.Background(), tenant, id); err != nil || !st.Policy.None {
		t.Errorf("after --no-egress: %+v, %v", st.Policy, err)
	}
	if code, _, stderr = runCLI(t, nil, "network", "--default", id); code != 1 || !strings.Contains(stderr, "no sandbox networking") {
		t.Errorf("network --default: exit %d stderr %q, want the server's refusal", code, stderr)
	}
	other := w.sandbox(api.CreateSandboxRequest{}).ID
	if code, stdout, _ = runCLI(t, nil, "network", other); code != 0 || !strings.Contains(stdout, "egress    the internet (not private ranges)\n") {
		t.Errorf("network of a sandbox with the default policy: exit %d stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "network", "--default", "--allow", "x.org", id); code != 2 || !strings.Contains(stderr, "usage: warren network") {
		t.Errorf("--default with --allow: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "network"); code != 2 {
		t.Errorf("no ID: exit %d stderr %q", code, stderr)
	}
}
