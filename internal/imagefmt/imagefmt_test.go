package imagefmt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCPUFacts(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "cpuinfo")
	write := func(s string) {
		if err := os.WriteFile(info, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nflags\t\t: fpu sse avx2\n\nprocessor\t: 1\nflags\t\t: fpu\n")
	got, err := cpuFacts(info)
	if err != nil {
		t.Fatal(err)
	}
	if want := "GenuineIntel\x006\x0085\x00fpu sse avx2"; got != want {
		t.Errorf("facts %q, want the first processor's %q", got, want)
	}
	write("processor\t: 0\n")
	if _, err := cpuFacts(info); err == nil || !strings.Contains(err.Error(), "no CPU flags") {
		t.Errorf("cpuinfo without flags: %v", err)
	}
}

func TestOf(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "agent")
	os.WriteFile(bin, []byte("one build"), 0o600)
	a, err := Of("gvisor", []string{"20240729"}, bin)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a, "gvisor-") {
		t.Errorf("format %q does not name its runtime", a)
	}
	if b, _ := Of("gvisor", []string{"20240729"}, bin); b != a {
		t.Errorf("the same parts gave %q and %q", a, b)
	}
	if b, _ := Of("gvisor", []string{"20250101"}, bin); b == a {
		t.Error("another version gave the same format")
	}
	os.WriteFile(bin, []byte("another build"), 0o600)
	if b, _ := Of("gvisor", []string{"20240729"}, bin); b == a {
		t.Error("another agent binary gave the same format")
	}
	if _, err := Of("gvisor", nil, filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file gave a format")
	}
}
