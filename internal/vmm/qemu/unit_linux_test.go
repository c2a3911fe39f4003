//go:build linux

package qemu

import (
	"os"
	"path/filepath"
	"testing"

	"warren/internal/vmm"
	"warren/internal/vmm/accel"
)

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		qemu    string
		running bool
		want    vmm.State
	}{
		{"running", true, vmm.StateRunning},
		{"prelaunch", false, vmm.StatePaused},
		{"paused", false, vmm.StatePaused},
		{"postmigrate", false, vmm.StatePaused},
		{"inmigrate", false, vmm.StatePaused},
		{"io-error", false, vmm.StateFailed},
		{"guest-panicked", false, vmm.StateFailed},
		{"internal-error", false, vmm.StateFailed},
		{"shutdown", false, vmm.StateFailed},
		{"some-future-state", true, vmm.StateRunning},
		{"some-future-state", false, vmm.StatePaused},
	} {
		if got := statusOf(tc.qemu, tc.running); got.State != tc.want || got.Detail != tc.qemu {
			t.Errorf("statusOf(%q, %v) = %+v, want %s", tc.qemu, tc.running, got, tc.want)
		}
	}
}

func TestLimits(t *testing.T) {
	tcg := limits(&vmm.Config{MemoryMiB: 512, VCPUs: 2, Accel: accel.TCG})
	if tcg.CPUs != 2 || tcg.Pids != 2+pidsOverhead || tcg.MemoryBytes != 512<<20+memOverhead+tcgOverhead {
		t.Errorf("tcg limits = %+v", tcg)
	}
	kvm := limits(&vmm.Config{MemoryMiB: 512, VCPUs: 2, Accel: accel.KVM})
	if kvm.MemoryBytes != 512<<20+memOverhead {
		t.Errorf("kvm limits = %+v", kvm)
	}
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if got := tail(path, 10); got != "" {
		t.Errorf("tail of a missing file = %q", got)
	}
	os.WriteFile(path, []byte("first line\nsecond line\nqemu: fatal\n"), 0o600)
	if got := tail(path, 1000); got != "first line\nsecond line\nqemu: fatal" {
		t.Errorf("tail = %q", got)
	}
	if got := tail(path, 20); got != "qemu: fatal" {
		t.Errorf("tail 20 = %q, want the last whole line", got)
	}
}
