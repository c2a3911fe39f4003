// Package vminit is the half of the microVM runtime that runs inside the
// guest before the agent serves: the static guest agent is the initramfs's
// /init, so the guest kernel starts it as PID 1; it calls Setup, which loads
// the virtio modules, mounts the sandbox's root disk (and its workspace
// disk, if it has one) and switches into it, and then goes on as the agent, serving on its virtio-serial port (package
// vmport).
//
// It is imported by the agent, so it stays small: x/sys and the standard
// library. It is not for anything on the host side: the initramfs is built
// by package guest (warren/internal/runtime/vm/guest), which shares the
// layout constants below with this package, and the VMM is driven by the VM
// runtime.
package vminit

// The contract between the initramfs builder (host) and Setup (guest).
const (
	// ModulesDir is the initramfs directory holding the kernel modules the
	// guest needs, each as NAME.ko (the module's name, underscores).
	ModulesDir = "/lib/modules"
	// ModulesManifest lists the modules of ModulesDir by name, one a line,
	// in the order they must be loaded (dependencies first).
	ModulesManifest = ModulesDir + "/order"

	// RootDevice is the sandbox's root disk: the first virtio-blk disk.
	RootDevice = "/dev/vda"
	// WorkspaceDevice is the sandbox's workspace disk, when it has one
	// (ParamWorkspace): the second virtio-blk disk, ext4, mounted at
	// WorkspaceDir.
	WorkspaceDevice = "/dev/vdb"
	// WorkspaceDir is where the workspace disk is mounted, as in a
	// container sandbox.
	WorkspaceDir = "/workspace"

	// Kernel command-line parameters Setup reads (the kernel passes dotted
	// parameters to no one, so they are read from /proc/cmdline).
	ParamVM        = "warren.vm"        // "1": this kernel runs a warren VM; Started requires it
	ParamHostname  = "warren.hostname"  // the sandbox's hostname, optional
	ParamWorkspace = "warren.workspace" // "1": mount WorkspaceDevice at WorkspaceDir
	ParamNetwork   = "warren.network"   // "1": configure the network device (package guest)
)
