package qemu

import (
	"slices"
	"strings"
	"testing"

	"warren/internal/vmm"
	"warren/internal/vmm/accel"
)

var testLayout = layout{qmpFD: 3, agentFD: 4, root: diskFDs{rw: 5, ro: 6, cache: cacheNone}, consoleFD: 7}

// option returns the value following flag's n-th occurrence, or "".
func option(args []string, flag string, n int) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			if n == 0 {
				return args[i+1]
			}
			n--
		}
	}
	return ""
}

func all(args []string, flag string) []string {
	var vs []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			vs = append(vs, args[i+1])
		}
	}
	return vs
}

func TestCommandLineTCG(t *testing.T) {
	cfg := &vmm.Config{ID: "sb-1", MemoryMiB: 256, VCPUs: 2, Accel: accel.TCG, RNG: true}
	args := commandLine(cfg, testLayout)
	t.Logf("qemu %s", strings.Join(args, " "))
	for flag, want := range map[string]string{
		"-machine": "q35,dump-guest-core=off,mem-merge=off",
		"-accel":   "tcg,tb-size=128",
		"-m":       "256M",
		"-smp":     "2",
		"-sandbox": "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-drive":   "if=none,id=root,format=raw,file=/dev/fdset/1,cache=none,file.locking=off,discard=unmap,detect-zeroes=unmap",
		"-serial":  "chardev:console",
		"-mon":     "chardev=qmp,mode=control",
		"-name":    "guest=sb-1,debug-threads=on",
	} {
		if got := option(args, flag, 0); got != want {
			t.Errorf("%s %q, want %q", flag, got, want)
		}
	}
	for _, flag := range []string{"-nodefaults", "-no-user-config", "-nographic", "-S", "-no-reboot"} {
		if !slices.Contains(args, flag) {
			t.Errorf("missing %s", flag)
		}
	}
	for _, flag := range []string{"-cpu", "-kernel", "-initrd", "-append", "-incoming"} {
		if slices.Contains(args, flag) {
			t.Errorf("unexpected %s", flag)
		}
	}
	wantDevices := []string{"virtio-blk-pci,drive=root", "virtio-serial-pci,id=vser0",
		"virtserialport,bus=vser0.0,chardev=agent,name=warren.agent", "virtio-rng-pci,rng=rng0"}
	if got := all(args, "-device"); !slices.Equal(got, wantDevices) {
		t.Errorf("devices %q, want %q", got, wantDevices)
	}
	wantChardevs := []string{"socket,id=qmp,fd=3,server=on,wait=off", "file,id=console,path=/dev/fdset/2,append=on",
		"socket,id=agent,fd=4,server=on,wait=off"}
	if got := all(args, "-chardev"); !slices.Equal(got, wantChardevs) {
		t.Errorf("chardevs %q, want %q", got, wantChardevs)
	}
	wantFds := []string{"fd=5,set=1,opaque=disk-rw", "fd=6,set=1,opaque=disk-ro", "fd=7,set=2,opaque=console"}
	if got := all(args, "-add-fd"); !slices.Equal(got, wantFds) {
		t.Errorf("add-fd %q, want %q", got, wantFds)
	}
}

func TestCommandLineKVM(t *testing.T) {
	cfg := &vmm.Config{ID: "sb-2", MemoryMiB: 512, VCPUs: 1, Accel: accel.KVM,
		Kernel: "/data/vmlinuz", Initrd: "/data/initrd", Cmdline: "console=ttyS0 quiet, panic=-1"}
	l := testLayout
	l.root.cache, l.restore = cacheWriteback, true
	args := commandLine(cfg, l)
	for flag, want := range map[string]string{
		"-machine":  "microvm,dump-guest-core=off,mem-merge=off",
		"-accel":    "kvm",
		"-cpu":      "host",
		"-kernel":   "/vm/kernel", // the jail's path, not the host's
		"-initrd":   "/vm/initrd",
		"-append":   "console=ttyS0 quiet, panic=-1",
		"-incoming": "defer",
		"-drive":    "if=none,id=root,format=raw,file=/dev/fdset/1,cache=writeback,file.locking=off,discard=unmap,detect-zeroes=unmap",
	} {
		if got := option(args, flag, 0); got != want {
			t.Errorf("%s %q, want %q", flag, got, want)
		}
	}
	wantDevices := []string{"virtio-blk-device,drive=root", "virtio-serial-device,id=vser0",
		"virtserialport,bus=vser0.0,chardev=agent,name=warren.agent"}
	if got := all(args, "-device"); !slices.Equal(got, wantDevices) {
		t.Errorf("devices %q, want %q (no rng)", got, wantDevices)
	}
	if strings.Contains(strings.Join(args, " "), "/data/") {
		t.Errorf("a host path leaked into the command line: %q", args)
	}
}

// TestCommandLineWorkspace: a workspace disk is a second virtio-blk disk
// after the root (the guest's /dev/vdb), from its own fd set, with its own
// cache mode.
func TestCommandLineWorkspace(t *testing.T) {
	l := testLayout
	l.workspace = diskFDs{rw: 8, ro: 9, cache: cacheWriteback}
	for _, tc := range []struct {
		accel, blk string
	}{{accel.TCG, "virtio-blk-pci"}, {accel.KVM, "virtio-blk-device"}} {
		cfg := &vmm.Config{ID: "sb-3", MemoryMiB: 256, VCPUs: 1, Accel: tc.accel, Workspace: "/data/ws.img"}
		args := commandLine(cfg, l)
		wantDrives := []string{
			"if=none,id=root,format=raw,file=/dev/fdset/1,cache=none,file.locking=off,discard=unmap,detect-zeroes=unmap",
			"if=none,id=workspace,format=raw,file=/dev/fdset/3,cache=writeback,file.locking=off,discard=unmap,detect-zeroes=unmap",
		}
		if got := all(args, "-drive"); !slices.Equal(got, wantDrives) {
			t.Errorf("%s: drives %q, want %q", tc.accel, got, wantDrives)
		}
		if got := all(args, "-device")[:2]; !slices.Equal(got, []string{tc.blk + ",drive=root", tc.blk + ",drive=workspace"}) {
			t.Errorf("%s: first devices %q, want the root disk, then the workspace disk", tc.accel, got)
		}
		wantFds := []string{"fd=5,set=1,opaque=disk-rw", "fd=6,set=1,opaque=disk-ro",
			"fd=8,set=3,opaque=workspace-rw", "fd=9,set=3,opaque=workspace-ro", "fd=7,set=2,opaque=console"}
		if got := all(args, "-add-fd"); !slices.Equal(got, wantFds) {
			t.Errorf("%s: add-fd %q, want %q", tc.accel, got, wantFds)
		}
		if strings.Contains(strings.Join(args, " "), "/data/") {
			t.Errorf("a host path leaked into the command line: %q", args)
		}
	}
}
