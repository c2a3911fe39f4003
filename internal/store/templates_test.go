package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestTemplateVersions: versions count up per tenant and name, also when
// builds race; the newest ready one is what a name resolves to; another
// tenant's are not seen; a finished version does not change again.
func TestTemplateVersions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := openTest(t, b)
		ctx := context.Background()
		var wg sync.WaitGroup
		vs := make([]TemplateVersion, 6)
		for i := range vs {
			wg.Go(func() {
				vs[i] = TemplateVersion{ID: fmt.Sprintf("tv-%d", i), Tenant: "acme", Name: "numpy", Source: "spec"}
				if err := s.InsertTemplateVersion(ctx, &vs[i]); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		seen := map[int64]bool{}
		for _, v := range vs {
			if v.Version < 1 || v.Version > 6 || seen[v.Version] || v.State != TemplateBuilding {
				t.Fatalf("versions %+v: want 1..6 once each, building", vs)
			}
			seen[v.Version] = true
		}
		if _, err := s.TemplateVersion(ctx, "acme", "numpy", 0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("latest with none ready: %v, want ErrNotFound", err)
		}
		byVersion := map[int64]*TemplateVersion{}
		for i := range vs {
			byVersion[vs[i].Version] = &vs[i]
		}
		for v, err := range map[int64]error{1: nil, 2: nil, 3: errors.New("step 2 failed")} {
			tv := byVersion[v]
			tv.Snapshot, tv.Digest = fmt.Sprintf("sn-%d", v), "sha256:x"
			if ferr := s.FinishTemplateVersion(ctx, tv, err); ferr != nil {
				t.Fatal(ferr)
			}
		}
		if err := s.FinishTemplateVersion(ctx, byVersion[1], nil); !errors.Is(err, ErrTransition) {
			t.Errorf("finishing a ready version again: %v, want ErrTransition", err)
		}
		latest, err := s.TemplateVersion(ctx, "acme", "numpy", 0)
		if err != nil || latest.Version != 2 || latest.Snapshot != "sn-2" || latest.BuiltAt.IsZero() {
			t.Errorf("latest: %+v, %v; want version 2 (3 failed, 4-6 building)", latest, err)
		}
		if v3, err := s.TemplateVersion(ctx, "acme", "numpy", 3); err != nil || v3.State != TemplateFailed || v3.Error != "step 2 failed" {
			t.Errorf("version 3: %+v, %v", v3, err)
		}
		if _, err := s.TemplateVersion(ctx, "other", "numpy", 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("another tenant's: %v, want ErrNotFound", err)
		}
		all, err := s.TemplateVersions(ctx, "acme", "numpy")
		if err != nil || len(all) != 6 || all[0].Version != 6 {
			t.Errorf("versions of numpy: %d, %v; want 6, newest first", len(all), err)
		}
		o := TemplateVersion{ID: "tv-o", Tenant: "acme", Name: "node", Source: "spec"}
		if err := s.InsertTemplateVersion(ctx, &o); err != nil || o.Version != 1 {
			t.Fatalf("another name: %+v, %v", o, err)
		}
		names, err := s.TemplateVersions(ctx, "acme", "")
		if err != nil || len(names) != 2 || names[0].Name != "node" || names[1].Version != 6 {
			t.Errorf("names: %+v, %v; want node then numpy@6", names, err)
		}

		if use, err := s.TemplateSnapshotUse(ctx, "sn-2"); err != nil || use != "template numpy@2" {
			t.Errorf("use of sn-2: %q, %v", use, err)
		}
		if use, err := s.TemplateSnapshotUse(ctx, "sn-3"); err != nil || use != "" {
			t.Errorf("use of a failed version's snapshot: %q, %v; want none", use, err)
		}
		if err := s.PutTemplateStep(ctx, "acme", "k1", "sn-9"); err != nil {
			t.Fatal(err)
		}
		if err := s.PutTemplateStep(ctx, "acme", "k1", "sn-10"); err != nil {
			t.Fatal(err)
		}
		if id, err := s.TemplateStep(ctx, "acme", "k1"); err != nil || id != "sn-10" {
			t.Errorf("step k1: %q, %v; want the newer sn-10", id, err)
		}
		if _, err := s.TemplateStep(ctx, "other", "k1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("another tenant's step: %v", err)
		}
		if use, _ := s.TemplateSnapshotUse(ctx, "sn-10"); use == "" {
			t.Error("a cached step's snapshot is not in use")
		}
		if err := s.DropTemplateStep(ctx, "sn-10"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TemplateStep(ctx, "acme", "k1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("dropped step: %v", err)
		}
		if err := s.DeleteTemplateVersion(ctx, "other", byVersion[2].ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("deleting another tenant's: %v", err)
		}
		if err := s.DeleteTemplateVersion(ctx, "acme", byVersion[2].ID); err != nil {
			t.Fatal(err)
		}
		if latest, err := s.TemplateVersion(ctx, "acme", "numpy", 0); err != nil || latest.Version != 1 {
			t.Errorf("latest after deleting 2: %+v, %v; want 1", latest, err)
		}

		// Publishing: ready versions only; the newest published is what
		// every tenant sees.
		if err := s.PublishTemplateVersion(ctx, "acme", byVersion[3].ID, true); !errors.Is(err, ErrTransition) {
			t.Errorf("publishing a failed version: %v, want ErrTransition", err)
		}
		if err := s.PublishTemplateVersion(ctx, "other", byVersion[1].ID, true); !errors.Is(err, ErrTransition) {
			t.Errorf("publishing another tenant's version: %v, want ErrTransition", err)
		}
		if _, err := s.PublishedTemplate(ctx, "acme", "numpy", 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("published before any is: %v", err)
		}
		if err := s.PublishTemplateVersion(ctx, "acme", byVersion[1].ID, true); err != nil {
			t.Fatal(err)
		}
		if p, err := s.PublishedTemplate(ctx, "acme", "numpy", 0); err != nil || p.Version != 1 || !p.Published {
			t.Errorf("published numpy: %+v, %v", p, err)
		}
		if _, err := s.PublishedTemplate(ctx, "acme", "numpy", 4); !errors.Is(err, ErrNotFound) {
			t.Errorf("an unpublished version pinned: %v", err)
		}
		if list, err := s.PublishedTemplates(ctx, "acme"); err != nil || len(list) != 1 || list[0].Version != 1 {
			t.Errorf("published list: %+v, %v", list, err)
		}
		if err := s.PublishTemplateVersion(ctx, "acme", byVersion[1].ID, false); err != nil {
			t.Fatal(err)
		}
		if list, _ := s.PublishedTemplates(ctx, "acme"); len(list) != 0 {
			t.Errorf("withdrawn, still listed: %+v", list)
		}

		sb := newSandbox("sb-t", "acme")
		sb.TemplateVersion = "numpy@1"
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetSandbox(ctx, "sb-t"); err != nil || got.TemplateVersion != "numpy@1" {
			t.Errorf("sandbox's template version: %q, %v", got.TemplateVersion, err)
		}
	})
}
