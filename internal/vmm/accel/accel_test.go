package accel

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

const (
	intelInfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de pse vmx ssse3 hypervisor\n\nprocessor\t: 1\nflags\t\t: fpu vme de pse vmx ssse3\n"
	amdInfo   = "processor\t: 0\nflags\t\t: fpu svm lm\n"
	pvmInfo   = "processor\t: 0\nflags\t\t: fpu vme de pse ssse3 hypervisor\n"
	// Words that merely contain vmx/svm must not count.
	lookalikeInfo = "processor\t: 0\nflags\t\t: fpu vmxsvm avx512_vmx_x svm_lock\nvmx flags\t: ept vpid\n"
)

func host(info string, devErr, probeErr error) Host {
	return Host{
		CPUInfo: func() ([]byte, error) { return []byte(info), nil },
		DevKVM:  func() error { return devErr },
		Probe:   func(context.Context) error { return probeErr },
	}
}

func TestDecide(t *testing.T) {
	notExist := errors.New("stat /dev/kvm: no such file or directory")
	for _, tc := range []struct {
		name       string
		h          Host
		want       string
		wantReason string
	}{
		{"intel with working kvm", host(intelInfo, nil, nil), KVM, "vmx/svm present"},
		{"amd with working kvm", host(amdInfo, nil, nil), KVM, "vmx/svm present"},
		{"pvm: /dev/kvm works but no flags", host(pvmInfo, nil, nil), TCG, "no vmx/svm"},
		{"no flags, no /dev/kvm", host(pvmInfo, notExist, nil), TCG, "no vmx/svm"},
		{"lookalike flags", host(lookalikeInfo, nil, nil), TCG, "no vmx/svm"},
		{"flags but no /dev/kvm", host(intelInfo, notExist, nil), TCG, "/dev/kvm is unusable"},
		{"flags but probe fails", host(intelInfo, nil, errors.New("KVM_CREATE_VM: EPERM")), TCG, "probe failed: KVM_CREATE_VM"},
		{"cpuinfo unreadable", Host{CPUInfo: func() ([]byte, error) { return nil, errors.New("EACCES") }}, TCG, "cannot read /proc/cpuinfo"},
		{"nothing injected", Host{}, TCG, "cannot read"},
		{"no probe", Host{CPUInfo: host(intelInfo, nil, nil).CPUInfo, DevKVM: func() error { return nil }}, TCG, "cannot probe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(context.Background(), tc.h)
			if got.Name != tc.want || !strings.Contains(got.Reason, tc.wantReason) {
				t.Errorf("Decide = %+v, want %s with a reason containing %q", got, tc.want, tc.wantReason)
			}
		})
	}
}

func TestDecideNotesPVM(t *testing.T) {
	h := host(pvmInfo, nil, nil)
	h.PVM = func() bool { return true }
	got := Decide(context.Background(), h)
	if got.Name != TCG || !strings.Contains(got.Reason, "kvm_pvm is loaded") || !strings.Contains(got.Reason, "/dev/kvm exists") {
		t.Errorf("Decide = %+v, want tcg noting kvm_pvm and /dev/kvm", got)
	}
}

// A probe that hangs (as an ioctl might on a broken hypervisor) must not
// hang the decision.
func TestDecideBoundsProbe(t *testing.T) {
	h := host(intelInfo, nil, nil)
	release := make(chan struct{})
	defer close(release)
	h.Probe = func(context.Context) error { <-release; return nil }
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	got := Decide(ctx, h)
	if got.Name != TCG || !strings.Contains(got.Reason, "did not answer") {
		t.Errorf("Decide = %+v, want tcg because the probe did not answer", got)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Decide took %v with a 50ms context", d)
	}
}
