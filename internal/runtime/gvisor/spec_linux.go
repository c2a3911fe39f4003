//go:build linux

package gvisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"

	"warren/internal/runtime"
	"warren/internal/runtime/container/containerinit"
	"warren/internal/runtime/gvisor/gvisorinit"
)

// The part of an OCI runtime bundle's config.json (runtime-spec 1.0) that
// runsc reads for warren's sandboxes.
type ociSpec struct {
	Version  string     `json:"ociVersion"`
	Process  ociProcess `json:"process"`
	Root     ociRoot    `json:"root"`
	Hostname string     `json:"hostname,omitempty"`
	Mounts   []ociMount `json:"mounts"`
	Linux    ociLinux   `json:"linux"`
}

type ociProcess struct {
	User            ociUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	Capabilities    ociCapabilities `json:"capabilities"`
	NoNewPrivileges bool            `json:"noNewPrivileges,omitempty"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociCapabilities struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Permitted   []string `json:"permitted"`
	Inheritable []string `json:"inheritable"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces  []ociNamespace `json:"namespaces"`
	CgroupsPath string         `json:"cgroupsPath,omitempty"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

// keptCaps are the capabilities every sandbox process keeps, as the
// container runtime's (containerinit.KeptCapabilities): the init's
// inheritable set. The init also has CAP_SYS_ADMIN, to make the sandbox's
// pids cgroup and to set a forked sandbox's hostname; it takes it out of
// the bounding set of what it starts (gvisorinit.Setup). All are
// capabilities in gVisor's kernel, not the host's.
var keptCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SYS_CHROOT",
	"CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP",
}

var initCaps = append(slices.Clip(keptCaps), "CAP_SYS_ADMIN")

// bundle writes the OCI bundle of a sandbox into dir: config.json, and
// rootfs, the root disk's mount point. The root is the disk, with writes
// going to it (runsc's own overlay is off); the init and its channel are
// bound read-only into a tmpfs at gvisorinit.Dir, which is not on the
// disk; the workspace disk's mount, if any, is bound at /workspace.
func (r *Runtime) bundle(dir string, spec runtime.Spec, cgroupPath, netns string) error {
	if err := os.MkdirAll(filepath.Join(dir, rootfsDir), 0o700); err != nil {
		return err
	}
	mounts := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"ro", "nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
		{Destination: gvisorinit.AgentPath, Type: "bind", Source: r.agent, Options: []string{"bind", "ro"}},
		{Destination: gvisorinit.ChanDir, Type: "bind", Source: filepath.Join(dir, chanDir), Options: []string{"bind", "ro"}},
	}
	// runsc mounts a tmpfs over an empty /tmp unless /tmp is mounted: bound
	// to itself, the disk's /tmp stays the disk's, as in the other
	// runtimes (snapshots keep it, and it is not the Sentry's memory).
	if fi, err := os.Lstat(filepath.Join(dir, rootfsDir, "tmp")); err == nil && fi.IsDir() {
		mounts = append(mounts, ociMount{Destination: "/tmp", Type: "bind", Source: filepath.Join(dir, rootfsDir, "tmp"), Options: []string{"bind", "rw"}})
	}
	if spec.Workspace != "" {
		mounts = append(mounts, ociMount{Destination: "/" + containerinit.WorkspaceDir, Type: "bind",
			Source: filepath.Join(dir, workspaceDir), Options: []string{"bind", "rw"}})
	}
	caps := ociCapabilities{Bounding: initCaps, Effective: initCaps, Permitted: initCaps, Inheritable: keptCaps}
	s := ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			Args:         gvisorinit.Args(initConfig(spec)),
			Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cwd:          "/",
			Capabilities: caps,
		},
		Root:     ociRoot{Path: rootfsDir},
		Hostname: spec.Hostname,
		Mounts:   mounts,
		Linux: ociLinux{
			Namespaces: []ociNamespace{
				{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"},
				{Type: "network", Path: netns},
			},
			CgroupsPath: cgroupPath,
		},
	}
	b, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// initConfig is what the init is told of spec.
func initConfig(spec runtime.Spec) gvisorinit.Config {
	cfg := gvisorinit.Config{Network: spec.Network != nil, Pids: spec.Limits.Pids}
	if spec.Limits.MemoryBytes > 0 {
		// The processes get their limit in full while the agent uses no
		// more than half its reserve.
		cfg.Memory = spec.Limits.MemoryBytes + runtime.AgentMemoryMB<<20/2
	}
	return cfg
}
