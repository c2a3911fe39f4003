package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/listing"
	"warren/internal/store"
)

// TestFork: fork prints its children, which start from a snapshot of the
// parent's disk with the parent's resources, env and metadata unless a
// flag says otherwise; a bad count is refused before anything is taken.
func TestFork(t *testing.T) {
	w := newWarren(t)
	parent := w.sandbox(api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{
		MemoryMB: 256, TimeoutSeconds: 600, Env: map[string]string{"A": "1"}, Metadata: map[string]string{"run": "r1"},
	}})
	code, stdout, stderr := runCLI(t, nil, "fork", "--count", "3", "--memory", "128", parent.ID)
	kids := strings.Fields(stdout)
	if code != 0 || len(kids) != 3 || !regexp.MustCompile(`^forked sb-\S+ from snapshot sn-\S+ \(paused [0-9.]+ ms\)\n$`).MatchString(stderr) {
		t.Fatalf("fork: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	snap := regexp.MustCompile(`sn-\S+`).FindString(stderr)
	for _, id := range kids {
		kid := w.get(id)
		if kid.Origin != snap || kid.MemoryMB != 128 || kid.CPUs != parent.CPUs || kid.Env["A"] != "1" ||
			kid.Metadata["run"] != "r1" || kid.ExpiresAt.Sub(kid.CreatedAt) != 10*time.Minute || kid.State != api.StateRunning {
			t.Errorf("child %+v; want from %s, 128 MiB, the parent's env, metadata and time to live", kid, snap)
		}
	}
	if code, _, stderr := runCLI(t, nil, "fork", "--count", "0", parent.ID); code != 2 || !strings.Contains(stderr, "count") {
		t.Errorf("fork --count 0: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "fork", "--count", "1000", parent.ID); code != 1 || !strings.Contains(stderr, "count must be between 1 and") {
		t.Errorf("fork --count 1000: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "fork", "sb-nonesuch"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("fork of no sandbox: exit %d stderr %q", code, stderr)
	}
	other, err := w.Deps.Store.CreateKey(context.Background(), store.Key{Tenant: "other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(client.EnvAPIKey, other)
	if code, _, stderr := runCLI(t, nil, "fork", parent.ID); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("fork of another tenant's sandbox: exit %d stderr %q", code, stderr)
	}
	if snaps, err := w.Manager.ListSnapshots(context.Background(), tenant, parent.ID, nil, listing.Page{}); err != nil || len(snaps) != 1 {
		t.Errorf("the parent's snapshots = %d, %v; want the first fork's alone", len(snaps), err)
	}
}
