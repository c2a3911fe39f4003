// Package accel decides, honestly, how a microVM's vCPUs run on this host:
// under KVM (hardware virtualization: the guest kernel runs in VMX non-root
// or SVM guest mode, the isolation boundary warren promises) or under QEMU's
// TCG (software emulation: slower, and its boundary is QEMU's emulator code).
//
// KVM is chosen only when all three hold:
//
//  1. /proc/cpuinfo lists vmx (Intel VT-x) or svm (AMD-V). A /dev/kvm alone
//     proves nothing: a PVM host (kvm_pvm, "pagetable-based virtual
//     machine") exposes /dev/kvm on CPUs without hardware virtualization,
//     answers the KVM API, creates VMs, and then a stock guest kernel hangs
//     at boot. The flags are the only cheap signal that tells it apart.
//  2. /dev/kvm exists and is a character device.
//  3. A bounded probe passes: open /dev/kvm, KVM_GET_API_VERSION is 12,
//     KVM_CREATE_VM succeeds.
//
// Otherwise it is TCG, with the reason. Even KVM's verdict is not a promise
// that a guest boots (nested or odd hypervisors exist): the runtime should
// still bound its first boot.
//
// It is not a general CPU feature library and it does not choose a machine
// type or CPU model (vmm/qemu does).
package accel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Accelerator names, as QEMU spells them.
const (
	KVM = "kvm"
	TCG = "tcg"
)

// ProbeTimeout bounds Detect's KVM probe.
const ProbeTimeout = 2 * time.Second

// Accel is the decision: Name is KVM or TCG, Reason says why in a sentence
// an operator can act on.
type Accel struct {
	Name   string
	Reason string
}

// Host is what Decide looks at. Detect fills it from the real host; tests
// inject their own. A nil function counts as a failure of that check.
type Host struct {
	// CPUInfo returns the contents of /proc/cpuinfo.
	CPUInfo func() ([]byte, error)
	// DevKVM returns nil if /dev/kvm exists and is a character device.
	DevKVM func() error
	// Probe opens /dev/kvm, checks the API version and creates (and drops)
	// a VM. It must return soon after ctx ends.
	Probe func(ctx context.Context) error
	// PVM reports whether the kvm_pvm module is loaded; it only adds a hint
	// to the reason. May be nil.
	PVM func() bool
}

// Decide applies the rules of the package comment to h. It never fails:
// every failed check is a TCG verdict with its reason. ctx bounds the
// probe; a probe that outlives ctx is a TCG verdict (its goroutine is left
// to finish on its own).
func Decide(ctx context.Context, h Host) Accel {
	if h.CPUInfo == nil {
		return Accel{TCG, "cannot read /proc/cpuinfo"}
	}
	info, err := h.CPUInfo()
	if err != nil {
		return Accel{TCG, fmt.Sprintf("cannot read /proc/cpuinfo: %v", err)}
	}
	if !hasVirtFlag(info) {
		reason := "no vmx/svm flag in /proc/cpuinfo: this CPU offers no hardware virtualization " +
			"(a /dev/kvm here would be PVM-style, under which stock guest kernels hang)"
		var notes []string
		if h.PVM != nil && h.PVM() {
			notes = append(notes, "kvm_pvm is loaded")
		}
		if h.DevKVM != nil {
			if err := h.DevKVM(); err != nil {
				notes = append(notes, fmt.Sprintf("/dev/kvm: %v", err))
			} else {
				notes = append(notes, "/dev/kvm exists")
			}
		}
		if len(notes) > 0 {
			reason += "; " + strings.Join(notes, ", ")
		}
		return Accel{TCG, reason}
	}
	if h.DevKVM == nil {
		return Accel{TCG, "cannot check /dev/kvm"}
	}
	if err := h.DevKVM(); err != nil {
		return Accel{TCG, fmt.Sprintf("vmx/svm present but /dev/kvm is unusable: %v", err)}
	}
	if h.Probe == nil {
		return Accel{TCG, "cannot probe /dev/kvm"}
	}
	done := make(chan error, 1) // buffered: a late probe must not block forever
	go func() { done <- h.Probe(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			return Accel{TCG, fmt.Sprintf("vmx/svm present but the KVM probe failed: %v", err)}
		}
	case <-ctx.Done():
		return Accel{TCG, fmt.Sprintf("vmx/svm present but the KVM probe did not answer: %v", ctx.Err())}
	}
	return Accel{KVM, "vmx/svm present, /dev/kvm speaks KVM API 12 and creates a VM"}
}

// hasVirtFlag reports whether a "flags" line of /proc/cpuinfo lists vmx or
// svm as a whole word.
func hasVirtFlag(cpuinfo []byte) bool {
	for line := range bytes.Lines(cpuinfo) {
		key, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(bytes.TrimSpace(key)) != "flags" {
			continue
		}
		for _, f := range bytes.Fields(value) {
			if string(f) == "vmx" || string(f) == "svm" {
				return true
			}
		}
	}
	return false
}

// errNotCharDevice is DevKVM's error for a /dev/kvm that is something else.
var errNotCharDevice = errors.New("not a character device")
