//go:build linux

package vm

import (
	"log/slog"
	"strings"
	"testing"

	"warren/internal/cgroup"
	"warren/internal/runtime"
	"warren/internal/vminit"
	"warren/internal/vmm/accel"
)

func TestCmdline(t *testing.T) {
	got := cmdline("sb-abc")
	for _, want := range []string{vminit.ParamVM + "=1", vminit.ParamHostname + "=sb-abc", "console=ttyS0"} {
		if !strings.Contains(got, want) {
			t.Errorf("cmdline %q lacks %q", got, want)
		}
	}
}

func TestIsolationIsHonest(t *testing.T) {
	for _, c := range []struct{ accel, want string }{
		{accel.KVM, "vm (QEMU, kvm)"},
		{accel.TCG, "software emulation"},
	} {
		r := &Runtime{accel: accel.Accel{Name: c.accel}}
		if got := r.Isolation(); !strings.Contains(got, c.want) {
			t.Errorf("accel %s: isolation %q, want it to say %q", c.accel, got, c.want)
		}
	}
}

// TestUnavailableWithoutKernel: a node without a guest kernel still gets a
// runtime, which says why it cannot run and refuses to start.
func TestUnavailableWithoutKernel(t *testing.T) {
	r, err := New(slog.New(slog.DiscardHandler), &cgroup.Hierarchy{}, "/nonexistent", Options{Dir: t.TempDir(), KernelDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Available() == nil {
		t.Fatal("available without a guest kernel")
	}
	if _, err := r.Start(t.Context(), runtime.Spec{ID: "x"}); err == nil {
		t.Error("started without a guest kernel")
	}
}
