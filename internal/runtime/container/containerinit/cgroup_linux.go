//go:build linux

package containerinit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupDir is where the sandbox sees its own cgroup, read-only.
const cgroupDir = "/sys/fs/cgroup"

// sandboxControllers are the v1 controllers mounted at cgroupDir: those of
// the sandbox's limits and usage, whose group the runtime moved the init
// into. Others (devices, blkio…) are left out: there the init is not in a
// group of its own, and their hierarchy would show the host's groups.
var sandboxControllers = []string{"cpu", "cpuacct", "memory", "pids"}

// mountCgroups mounts the sandbox's cgroup at cgroupDir, read-only, for the
// agent's Metrics and for runtimes that size themselves by their cgroup's
// limits. It must run after the cgroup namespace is made: a cgroupfs mounted
// in it shows the namespace's root, the sandbox's group (and its work
// subgroup), never the host's groups. Read-only, and nothing in the sandbox
// can remount it (no CAP_SYS_ADMIN, mount is refused by seccomp); the files
// belong to the host's root besides, unmapped in the sandbox's user
// namespace. On v1 each hierarchy gets a directory named for its
// controllers on a read-only tmpfs, with a symlink per controller when
// several share one ("cpu" → "cpu,cpuacct"), as systemd lays them out.
func mountCgroups() error {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return fmt.Errorf("mount cgroups: %w", err)
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	var hierarchies []string // v1 controller lists, such as "cpu,cpuacct"
	v2 := false
	for line := range strings.Lines(string(self)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = true
			continue
		}
		ours := slices.ContainsFunc(strings.Split(f[1], ","), func(c string) bool { return slices.Contains(sandboxControllers, c) })
		if ours && !slices.Contains(hierarchies, f[1]) {
			hierarchies = append(hierarchies, f[1])
		}
	}
	if len(hierarchies) == 0 {
		if !v2 {
			return errors.New("mount cgroups: no hierarchy in /proc/self/cgroup")
		}
		if err := unix.Mount("cgroup2", cgroupDir, "cgroup2", flags|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("mount cgroup2: %w", err)
		}
		return nil
	}
	const tmpfsData = "mode=755,size=64k"
	if err := unix.Mount("tmpfs", cgroupDir, "tmpfs", flags, tmpfsData); err != nil {
		return fmt.Errorf("mount cgroups: %w", err)
	}
	for _, h := range hierarchies {
		dir := filepath.Join(cgroupDir, h)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("mount cgroups: %w", err)
		}
		if err := unix.Mount("cgroup", dir, "cgroup", flags|unix.MS_RDONLY, h); err != nil {
			return fmt.Errorf("mount cgroup %s: %w", h, err)
		}
		for c := range strings.SplitSeq(h, ",") {
			if c != h {
				if err := os.Symlink(h, filepath.Join(cgroupDir, c)); err != nil {
					return fmt.Errorf("mount cgroups: %w", err)
				}
			}
		}
	}
	if err := unix.Mount("", cgroupDir, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, tmpfsData); err != nil {
		return fmt.Errorf("mount cgroups read-only: %w", err)
	}
	return nil
}
