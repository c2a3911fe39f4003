package main

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"warren/api"
)

// The fake's network routes: a sandbox's policy is what create or the last
// PUT gave it; nothing is ever refused.

func (f *fakeWarren) networkOf(id string) api.NetworkStatus {
	return api.NetworkStatus{Policy: f.sandboxes[id].Network, Address: "10.0.2.15", Gateway: "10.0.2.2", Denied: 3}
}

func (f *fakeWarren) getNetwork(w http.ResponseWriter, r *http.Request, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answer(w, http.StatusOK, f.networkOf(id))
}

func (f *fakeWarren) setNetwork(w http.ResponseWriter, r *http.Request, id string) {
	var p api.NetworkPolicy
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
		fail(w, api.Errorf(api.CodeBadRequest, "%v", err))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.sandboxes[id]
	sb.Network = p
	f.sandboxes[id] = sb
	answer(w, http.StatusOK, f.networkOf(id))
}

func TestNetworkFlagsOnCreate(t *testing.T) {
	f := newFake(t)
	if code, _, stderr := runCLI(t, nil, "create", "--allow", "pypi.org,*.pythonhosted.org", "--allow", "10.1.0.0/16", "--deny", "10.1.2.3"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "create"); code != 0 {
		t.Fatalf("create: exit %d: %s", code, stderr)
	}
	f.with(func() {
		want := &api.NetworkPolicy{Allow: []string{"pypi.org", "*.pythonhosted.org", "10.1.0.0/16"}, Deny: []string{"10.1.2.3"}}
		if got := f.creates[0].Network; !reflect.DeepEqual(got, want) {
			t.Errorf("create sent network %+v, want %+v", got, want)
		}
		if f.creates[1].Network != nil {
			t.Errorf("create without network flags sent %+v, want none (the server's default)", f.creates[1].Network)
		}
	})
}

func TestNetworkCommand(t *testing.T) {
	f := newFake(t)
	id := f.addSandbox(api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Network: &api.NetworkPolicy{Allow: []string{"pypi.org"}}}}).ID
	code, stdout, stderr := runCLI(t, nil, "network", id)
	if code != 0 || !strings.Contains(stdout, "egress    only pypi.org\n") || !strings.Contains(stdout, "refused   3 (rate limited 0)\n") {
		t.Errorf("network: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ = runCLI(t, nil, "network", "--no-egress", id); code != 0 || !strings.Contains(stdout, "egress    none\n") {
		t.Errorf("network --no-egress: exit %d stdout %q", code, stdout)
	}
	if code, stdout, _ = runCLI(t, nil, "network", "--default", id); code != 0 || !strings.Contains(stdout, "egress    the internet (not private ranges)\n") {
		t.Errorf("network --default: exit %d stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "network", "--default", "--allow", "x.org", id); code != 2 || !strings.Contains(stderr, "usage: warren network") {
		t.Errorf("--default with --allow: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "network"); code != 2 {
		t.Errorf("no ID: exit %d stderr %q", code, stderr)
	}
}
