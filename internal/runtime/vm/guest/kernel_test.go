package guest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeKernel makes an extracted release dir/RELEASE with the given files
// (relative to its module tree) and returns it.
func fakeKernel(t *testing.T, dir, release string, modules map[string]string) Kernel {
	t.Helper()
	root := filepath.Join(dir, release)
	mods := filepath.Join(root, "lib/modules", release)
	if err := os.MkdirAll(mods, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "vmlinuz"), []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, data := range modules {
		p := filepath.Join(mods, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Kernel{Version: release, Vmlinuz: filepath.Join(root, "vmlinuz"), ModulesDir: mods}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	fakeKernel(t, dir, "6.1.0-9-cloud-amd64", nil)
	newest := fakeKernel(t, dir, "6.1.0-57-cloud-amd64", nil)
	os.MkdirAll(filepath.Join(dir, ".6.1.0-99-cloud-amd64.tmp"), 0o755) // an extraction in progress
	os.MkdirAll(filepath.Join(dir, "junk"), 0o755)                      // no vmlinuz: not a release

	k, err := Find(dir)
	if err != nil || k != newest {
		t.Errorf("Find(%s) = %+v, %v; want %+v", dir, k, err, newest)
	}
	// A release directory itself.
	k, err = Find(filepath.Join(dir, "6.1.0-9-cloud-amd64"))
	if err != nil || k.Version != "6.1.0-9-cloud-amd64" {
		t.Errorf("Find(release dir) = %+v, %v", k, err)
	}
	for _, empty := range []string{t.TempDir(), filepath.Join(dir, "missing")} {
		_, err = Find(empty)
		if !errors.Is(err, ErrNoKernel) || !strings.Contains(err.Error(), "scripts/deps.sh") {
			t.Errorf("Find(%s): %v, want ErrNoKernel naming scripts/deps.sh", empty, err)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	sorted := []string{"5.10.0-1-cloud-amd64", "6.1.0-9-cloud-amd64", "6.1.0-50-cloud-amd64", "6.1.0-57-cloud-amd64", "6.1.0-57-cloud-amd64x", "6.12.0-1-cloud-amd64"}
	shuffled := []string{sorted[3], sorted[0], sorted[5], sorted[1], sorted[4], sorted[2]}
	slices.SortFunc(shuffled, compareVersions)
	if !slices.Equal(shuffled, sorted) {
		t.Errorf("sorted %v, want %v", shuffled, sorted)
	}
	if compareVersions("6.1", "6.1") != 0 {
		t.Error("equal versions differ")
	}
}

func TestModulesFromModulesDep(t *testing.T) {
	k := fakeKernel(t, t.TempDir(), "6.1.0-1-test", map[string]string{
		"modules.order": "kernel/v/virtio.ko\nkernel/v/virtio_ring.ko\nkernel/v/virtio_pci_modern_dev.ko\nkernel/v/virtio_pci.ko\nkernel/b/virtio_blk.ko\nkernel/c/virtio-rng.ko\nkernel/x/unused.ko\n",
		"modules.dep": "kernel/v/virtio.ko: kernel/v/virtio_ring.ko\n" +
			"kernel/v/virtio_ring.ko:\n" +
			"kernel/v/virtio_pci_modern_dev.ko:\n" +
			"kernel/v/virtio_pci.ko: kernel/v/virtio_pci_modern_dev.ko kernel/v/virtio.ko kernel/v/virtio_ring.ko\n" +
			"kernel/b/virtio_blk.ko: kernel/v/virtio.ko kernel/v/virtio_ring.ko crc_builtin.ko\n" +
			"kernel/c/virtio-rng.ko: kernel/v/virtio.ko kernel/v/virtio_ring.ko\n" +
			"kernel/x/unused.ko:\n",
		"modules.builtin": "kernel/lib/crc-builtin.ko\n",
	})
	mods, err := k.Modules("virtio_pci", "virtio_blk", "virtio-rng", "crc_builtin")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mods {
		names = append(names, m.Name)
	}
	want := []string{"virtio_pci_modern_dev", "virtio_ring", "virtio", "virtio_pci", "virtio_blk", "virtio_rng"}
	if !slices.Equal(names, want) {
		t.Errorf("order %v, want %v", names, want)
	}
	if got := mods[len(mods)-1].Path; got != filepath.Join(k.ModulesDir, "kernel/c/virtio-rng.ko") {
		t.Errorf("virtio_rng path %s", got)
	}

	if _, err := k.Modules("nonesuch"); err == nil {
		t.Error("unknown module: no error")
	}
}

func TestModulesCycle(t *testing.T) {
	k := fakeKernel(t, t.TempDir(), "6.1.0-1-test", map[string]string{
		"modules.order": "a.ko\nb.ko\n",
		"modules.dep":   "a.ko: b.ko\nb.ko: a.ko\n",
	})
	if _, err := k.Modules("a"); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("cycle: %v", err)
	}
}

// realKernel is the guest kernel scripts/deps.sh extracted, or a skip.
func realKernel(t *testing.T) Kernel {
	t.Helper()
	k, err := Find(DefaultDir)
	if err != nil {
		t.Skipf("no extracted guest kernel: %v", err)
	}
	return k
}

// TestGuestModulesOfTheRealKernel orders GuestModules of the extracted
// Debian cloud kernel from the modules' own dependency data (its package
// has no modules.dep): every module comes after what it depends on.
func TestGuestModulesOfTheRealKernel(t *testing.T) {
	k := realKernel(t)
	mods, err := k.Modules(GuestModules...)
	if err != nil {
		t.Fatal(err)
	}
	pos := make(map[string]int)
	var names []string
	for i, m := range mods {
		if _, dup := pos[m.Name]; dup {
			t.Errorf("%s listed twice", m.Name)
		}
		pos[m.Name] = i
		names = append(names, m.Name)
	}
	t.Logf("%s: %v", k.Version, names)
	for _, m := range mods {
		deps, err := modinfoDepends(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range deps {
			if p, ok := pos[d]; !ok || p > pos[m.Name] {
				t.Errorf("%s depends on %s, which is not loaded before it", m.Name, d)
			}
		}
	}
	for _, n := range append([]string{"virtio", "virtio_ring"}, GuestModules...) {
		if _, ok := pos[n]; !ok {
			t.Errorf("%s missing from %v", n, names)
		}
	}
	// 6.1 split the PCI transport's device helpers out of virtio_pci.
	if strings.HasPrefix(k.Version, "6.1.") {
		for _, n := range []string{"virtio_pci_modern_dev", "virtio_pci_legacy_dev"} {
			if p, ok := pos[n]; !ok || p > pos["virtio_pci"] {
				t.Errorf("%s not before virtio_pci in %v", n, names)
			}
		}
	}
}
