//go:build linux

package accel

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// KVM ioctls (linux/kvm.h): _IO(KVMIO, 0x00) and _IO(KVMIO, 0x01).
const (
	kvmGetAPIVersion = 0xAE00
	kvmCreateVM      = 0xAE01
	// kvmAPIVersion is the only KVM API version Linux has ever had.
	kvmAPIVersion = 12
)

// Detect decides for this host, probing /dev/kvm for at most ProbeTimeout
// (or until ctx ends).
func Detect(ctx context.Context) Accel {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	return Decide(ctx, SystemHost())
}

// SystemHost is the real host: /proc/cpuinfo, /dev/kvm,
// /sys/module/kvm_pvm.
func SystemHost() Host {
	return Host{
		CPUInfo: func() ([]byte, error) { return os.ReadFile("/proc/cpuinfo") },
		DevKVM:  statDevKVM,
		Probe:   probeKVM,
		PVM: func() bool {
			_, err := os.Stat("/sys/module/kvm_pvm")
			return err == nil
		},
	}
}

func statDevKVM() error {
	fi, err := os.Stat("/dev/kvm")
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeCharDevice == 0 {
		return errNotCharDevice
	}
	return nil
}

// probeKVM opens /dev/kvm, checks the API version and creates a VM. The
// ioctls cannot be interrupted; ctx is only checked between them (Decide
// stops waiting when ctx ends).
func probeKVM(ctx context.Context) error {
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %w", err)
	}
	defer unix.Close(fd)
	v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		return fmt.Errorf("KVM_GET_API_VERSION: %w", err)
	}
	if v != kvmAPIVersion {
		return fmt.Errorf("KVM API version %d, want %d", v, kvmAPIVersion)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	vm, err := unix.IoctlRetInt(fd, kvmCreateVM)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	unix.Close(vm)
	return nil
}
