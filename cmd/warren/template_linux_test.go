package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warren/api"
	"warren/internal/store"
)

// TestTemplateCommands: a snapshot promoted with template create is a
// version sandboxes start from; versions count up; get, versions, ls and
// rm show and delete them; the refusals say why and make nothing.
func TestTemplateCommands(t *testing.T) {
	w := newWarren(t)
	ctx := context.Background()
	sb := w.sandbox(api.CreateSandboxRequest{})
	snap := snapshotOf(t, sb.ID, "--wait")

	for i, want := range []string{"base@1\n", "base@2\n"} {
		code, stdout, stderr := runCLI(t, nil, "template", "create", "--no-progress", "--from", snap, "base")
		if code != 0 || stdout != want {
			t.Fatalf("template create %d: exit %d stdout %q stderr %q, want %q", i+1, code, stdout, stderr, want)
		}
	}
	kid, err := w.Manager.Create(ctx, tenant, api.CreateSandboxRequest{Template: "base@1"})
	if err != nil || kid.TemplateVersion != "base@1" || kid.Origin != snap {
		t.Fatalf("create from base@1: %+v, %v; want it restored from %s", kid, err, snap)
	}
	var got api.Template
	if code, stdout, _ := runCLI(t, nil, "template", "get", "base"); code != 0 || json.Unmarshal([]byte(stdout), &got) != nil ||
		got.Ref != "base@2" || got.State != api.TemplateReady || got.Snapshot != snap || got.Source != "snapshot "+snap {
		t.Errorf("template get base: exit %d %q, want base@2, ready, on %s", code, stdout, snap)
	}
	code, stdout, _ := runCLI(t, nil, "template", "versions", "base")
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); code != 0 || len(lines) != 3 ||
		!strings.HasPrefix(lines[1], "base@2 ") || !strings.HasPrefix(lines[2], "base@1 ") {
		t.Errorf("template versions: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(t, nil, "template", "ls")
	if code != 0 || !strings.Contains(stdout, "default ") || !strings.Contains(stdout, "base ") {
		t.Errorf("template ls: exit %d\n%s\nwant default and base", code, stdout)
	}

	// Refusals.
	dir := t.TempDir()
	bad := filepath.Join(dir, "warren.yaml")
	if err := os.WriteFile(bad, []byte("from: default\nsteps:\n  - apt: [python3-pip]\n  - mystery: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"template", "create", "--from", snap, "default"}, "built in"},
		{[]string{"template", "create", "--from", snap, "Bad Name"}, "name"},
		{[]string{"template", "create", "--from", "sn-nope", "x"}, "not found"},
		{[]string{"template", "create", "x"}, "give one of --from, --from-image and --from-archive"},
		{[]string{"template", "create", "--from-archive", "/dev/null", "x"}, "the image archive is empty"},
		{[]string{"template", "create", "--from-image", "/etc/passwd", "x"}, "not a path"},
		{[]string{"template", "create", "--from-image", "127.0.0.1:1/x:1", "--insecure", "x"}, "not a public address"},
		{[]string{"template", "build", "-f", bad, "x"}, "line 4"},
		{[]string{"template", "rm", "base@1"}, "in use by sandbox " + kid.ID},
		{[]string{"snapshot", "rm", snap}, "the disk of template base@"},
		{[]string{"template", "get", "nope@3"}, "not found"},
	} {
		code, stdout, stderr := runCLI(t, nil, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d stdout %q stderr %q, want an error saying %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	if all, err := w.Deps.Store.TemplateVersions(ctx, tenant, ""); err != nil || len(all) != 1 {
		t.Errorf("after the refusals: %d names (%v), want base alone", len(all), err)
	}

	// Another tenant sees none of it.
	if _, err := w.Templates.TenantTemplate(ctx, "bob", "base"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("bob's get of base: %v, want not found", err)
	}
	if _, err := w.Manager.Create(ctx, "bob", api.CreateSandboxRequest{Template: "base"}); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("bob's create from base: %v, want not found", err)
	}
	if err := w.Manager.DeleteSnapshot(ctx, "bob", snap); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("bob's delete of the snapshot: %v, want not found, whatever uses it", err)
	}

	if err := w.Manager.Delete(ctx, tenant, kid.ID); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, nil, "template", "rm", "base"); code != 0 {
		t.Fatalf("template rm base: exit %d %s", code, stderr)
	}
	if _, err := w.Deps.Store.TemplateVersion(ctx, tenant, "base", 0); err != store.ErrNotFound {
		t.Errorf("after rm: %v, want none", err)
	}
	// The promoted snapshot was the tenant's own: it stays theirs.
	if _, err := w.Manager.GetSnapshot(ctx, tenant, snap); err != nil {
		t.Errorf("the promoted snapshot after rm: %v", err)
	}
}

// TestTemplateShared: a version the admin publishes is every tenant's to
// start from, by name, under a name of its own if it has one; a tenant
// cannot delete or publish it; withdrawn, it is gone for them.
func TestTemplateShared(t *testing.T) {
	w := newWarren(t)
	ctx := context.Background()
	w.asAdmin()
	sb, err := w.Manager.Create(ctx, api.AdminTenant, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshotOf(t, sb.ID, "--wait")
	if code, stdout, stderr := runCLI(t, nil, "template", "create", "--no-progress", "--from", snap, "tools"); code != 0 || stdout != "tools@1\n" {
		t.Fatalf("the admin's template: exit %d %q %s", code, stdout, stderr)
	}
	if _, err := w.Manager.Create(ctx, "bob", api.CreateSandboxRequest{Template: "tools"}); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("bob's create before it is published: %v, want not found", err)
	}
	if code, stdout, stderr := runCLI(t, nil, "template", "share", "tools@1"); code != 0 || stdout != "tools@1 shared\n" {
		t.Fatalf("template share: exit %d %q %s", code, stdout, stderr)
	}
	kid, err := w.Manager.Create(ctx, "bob", api.CreateSandboxRequest{Template: "tools"})
	if err != nil || kid.TemplateVersion != "tools@1" || kid.Tenant != "bob" {
		t.Fatalf("bob's create from the published tools: %+v, %v", kid, err)
	}
	list, err := w.Templates.TenantTemplates(ctx, "bob")
	if err != nil || len(list) != 1 || !list[0].Shared || list[0].Ref != "tools@1" {
		t.Errorf("bob's templates: %+v, %v; want tools@1, shared", list, err)
	}
	if err := w.Templates.DeleteTemplate(ctx, "bob", "tools@1"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("bob deleting the admin's template: %v, want not found", err)
	}
	// bob's snapshot of that sandbox restores: its lineage goes through
	// the admin's snapshot.
	bobSnap, err := w.Manager.Snapshot(ctx, "bob", kid.ID, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Manager.Restore(ctx, "bob", bobSnap.ID, api.RestoreRequest{}); err != nil {
		t.Errorf("restore bob's snapshot of a published template's sandbox: %v", err)
	}
	// A name of bob's own comes first for bob.
	own := w.sandbox(api.CreateSandboxRequest{})
	ownSnap, err := w.Manager.Snapshot(ctx, tenant, own.ID, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Templates.CreateTemplate(ctx, tenant, api.CreateTemplateRequest{Name: "tools", FromSnapshot: ownSnap.ID}, nil); err != nil {
		t.Fatal(err)
	}
	mine, err := w.Manager.Create(ctx, tenant, api.CreateSandboxRequest{Template: "tools"})
	if err != nil || mine.Origin != ownSnap.ID {
		t.Errorf("acme's create from tools: %+v, %v; want its own", mine, err)
	}
	if code, stdout, stderr := runCLI(t, nil, "template", "share", "--withdraw", "tools@1"); code != 0 || stdout != "tools@1 withdrawn\n" {
		t.Fatalf("template share --withdraw: exit %d %q %s", code, stdout, stderr)
	}
	if _, err := w.Manager.Create(ctx, "bob", api.CreateSandboxRequest{Template: "tools"}); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("bob's create once withdrawn: %v, want not found", err)
	}
	if code, _, stderr := runCLI(t, nil, "template", "share", "tools"); code == 0 || !strings.Contains(stderr, "NAME@VERSION") {
		t.Errorf("share without a version: exit %d %s", code, stderr)
	}
}
