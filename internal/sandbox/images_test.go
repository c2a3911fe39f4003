package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/store"
)

// readyImage adds a ready image of key to is, with its two files.
func readyImage(t *testing.T, is *images, key imageKey, used time.Time) *image {
	t.Helper()
	img := &image{key: key, disk: filepath.Join(is.dir, key.template+".img"), memory: filepath.Join(is.dir, key.template+".mem"),
		ready: true, used: used}
	for _, p := range []string{img.disk, img.memory} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	is.byKey[key] = img
	return img
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// TestImageBookkeeping: a start holds an image while it clones and
// restores; one that fails drops the image, whose files go once no start
// holds them; eviction takes the least recently used image no start holds;
// an earlier daemon's images are removed at start.
func TestImageBookkeeping(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, "old.mem")
	os.WriteFile(left, nil, 0o600)
	is, err := newImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	if exists(left) {
		t.Error("an earlier daemon's image was kept")
	}
	m := &Manager{images: is}
	now := time.Now()
	a := readyImage(t, is, imageKey{template: "a", vcpus: 1, memoryMB: 512}, now.Add(-time.Minute))
	b := readyImage(t, is, imageKey{template: "b", vcpus: 1, memoryMB: 512}, now)

	if m.takeImage(imageKey{template: "c"}) != nil {
		t.Error("took an image of a shape that has none")
	}
	held := m.takeImage(a.key)
	if held != a || a.users != 1 {
		t.Fatalf("take: %v users %d", held, a.users)
	}
	// a is the least recently used, but held: b goes.
	a.used = now.Add(-time.Hour)
	if !is.evictLocked() || is.byKey[b.key] != nil || exists(b.memory) || is.byKey[a.key] == nil {
		t.Errorf("eviction with a held: images %v, b's memory there %v", is.byKey, exists(b.memory))
	}
	if is.evictLocked() {
		t.Error("evicted a held image")
	}
	// A second start takes a; the first fails: a is dropped, its files
	// stay for the second start, then go.
	m.takeImage(a.key)
	m.releaseImage(a, true)
	if a.ready || m.takeImage(a.key) != nil || !exists(a.disk) {
		t.Errorf("after a failed start: ready %v, disk there %v", a.ready, exists(a.disk))
	}
	m.releaseImage(a, false)
	if exists(a.disk) || exists(a.memory) || a.users != 0 {
		t.Errorf("a dropped image's files outlived its last start: disk %v memory %v users %d", exists(a.disk), exists(a.memory), a.users)
	}
	// A failed image is evicted before the node waits out its retry.
	if !is.evictLocked() || len(is.byKey) != 0 {
		t.Errorf("the failed image was not evicted: %v", is.byKey)
	}
	is.close()
	if exists(dir) {
		t.Error("close left the images' directory")
	}
}

// TestImageQueuedBehindAnother: a shape whose boots call for its image
// while another image is being prepared is kept as the next to prepare
// (the latest such), not forgotten until a later boot; a shape with a
// ready image calls for none.
func TestImageQueuedBehindAnother(t *testing.T) {
	is, err := newImages(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{images: is}
	a, b := imageKey{template: "a", vcpus: 1, memoryMB: 448}, imageKey{template: "b", vcpus: 1, memoryMB: 448}
	is.preparing = true // another shape's image
	for range imageBoots {
		m.booted(nil, a, source{template: "a"})
	}
	if is.next == nil || is.next.key != a || len(is.byKey) != 0 {
		t.Fatalf("after a's boots during another preparation: next %+v, images %v", is.next, is.byKey)
	}
	for range imageBoots {
		m.booted(nil, b, source{template: "b"})
	}
	if is.next == nil || is.next.key != b {
		t.Errorf("the latest shape is not the next: %+v", is.next)
	}
	is.preparing, is.next = false, nil
	readyImage(t, is, a, time.Now())
	m.prepareLocked(nil, a, source{template: "a"})
	if is.preparing || len(is.byKey) != 1 {
		t.Errorf("a shape with a ready image was prepared again: preparing %v, images %v", is.preparing, is.byKey)
	}
	is.close()
}

// TestSameMachine: a live fork's children must be their parent's machine;
// what the parent's inherit fills in passes, and each difference is
// refused naming the field.
func TestSameMachine(t *testing.T) {
	parent := store.Sandbox{ID: "sb-p", Runtime: "vm", CPUs: 1.5, MemoryMB: 512}
	spec := inherit(api.SandboxSpec{}, parent, time.Hour)
	if err := sameMachine(spec, parent); err != nil {
		t.Fatalf("the parent's own spec: %v", err)
	}
	ws := store.Sandbox{ID: "sb-w", Runtime: "vm", CPUs: 1, MemoryMB: 512, WorkspaceMB: 128}
	if err := sameMachine(api.SandboxSpec{Runtime: "vm", CPUs: 1, MemoryMB: 512, WorkspaceMB: 128}, ws); err != nil {
		t.Errorf("the parent's own workspace size: %v", err)
	}
	half := spec
	half.CPUs = 2 // the same 2 vCPUs, another quota
	if err := sameMachine(half, parent); err != nil {
		t.Errorf("cpus 2 for a parent of 1.5 (both 2 vCPUs): %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(*api.SandboxSpec)
		word   string
	}{
		{"runtime", func(s *api.SandboxSpec) { s.Runtime = "container" }, "runtime"},
		{"vcpus", func(s *api.SandboxSpec) { s.CPUs = 3 }, "vCPUs"},
		{"memory", func(s *api.SandboxSpec) { s.MemoryMB = 1024 }, "memory_mb"},
		{"workspace", func(s *api.SandboxSpec) { s.WorkspaceMB = 128 }, "workspace"},
	} {
		s := spec
		c.change(&s)
		err := sameMachine(s, parent)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(err.Error(), c.word) {
			t.Errorf("%s: %v, want a 400 naming %s", c.name, err, c.word)
		}
	}
}
