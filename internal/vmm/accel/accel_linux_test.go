//go:build linux

package accel

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestDetectThisHost runs the real detection. On the machines warren is
// built on (§5 of the design brief) the CPU has no vmx/svm, so it must say
// TCG for that reason; elsewhere it must agree with the flags.
func TestDetectThisHost(t *testing.T) {
	got := Detect(context.Background())
	t.Logf("accel: %s (%s)", got.Name, got.Reason)
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !hasVirtFlag(info) {
		if got.Name != TCG || !strings.HasPrefix(got.Reason, "no vmx/svm") {
			t.Errorf("Detect = %+v, want tcg with reason \"no vmx/svm…\"", got)
		}
		return
	}
	if _, err := os.Stat("/dev/kvm"); err != nil && got.Name != TCG {
		t.Errorf("Detect = %+v without /dev/kvm, want tcg", got)
	}
}

// TestProbeKVM runs the real probe: it must fail cleanly without /dev/kvm
// and, with flags and /dev/kvm, agree with Detect.
func TestProbeKVM(t *testing.T) {
	err := probeKVM(context.Background())
	if _, serr := os.Stat("/dev/kvm"); serr != nil {
		if err == nil {
			t.Fatal("probeKVM succeeded without /dev/kvm")
		}
		t.Logf("probe without /dev/kvm: %v", err)
		return
	}
	t.Logf("probe with /dev/kvm: %v", err)
}
