package guest

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"warren/internal/runtime/vm/vminit"
)

// BuildInitramfs writes the initramfs of a guest of kernel k to w: an
// uncompressed newc cpio archive holding
//
//	/init                      the static guest agent (agentBinary)
//	/dev/console               the console, for init's stdin, stdout and stderr
//	/lib/modules/NAME.ko       the modules of GuestModules and their dependencies
//	/lib/modules/order         their names in load order (vminit.ModulesManifest)
//	/proc, /sys                mount points for vminit.Setup
//
// Uncompressed because the archive is read once from the host's page cache
// and unpacked by a guest that may run under software emulation, where
// inflating the agent costs more than copying it.
func BuildInitramfs(w io.Writer, agentBinary string, k Kernel) error {
	mods, err := k.Modules(GuestModules...)
	if err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	c := newCPIOWriter(w)
	modulesDir := strings.TrimPrefix(vminit.ModulesDir, "/")
	for _, d := range []string{"dev", "proc", "sys", "lib", modulesDir} {
		if err := c.Dir(d, 0o755); err != nil {
			return fmt.Errorf("build initramfs: %w", err)
		}
	}
	if err := c.CharDev("dev/console", 0o600, 5, 1); err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	if err := addFile(c, "init", agentBinary, 0o755); err != nil {
		return fmt.Errorf("build initramfs: agent: %w", err)
	}
	var manifest strings.Builder
	for _, m := range mods {
		if err := addFile(c, path.Join(modulesDir, m.Name+".ko"), m.Path, 0o644); err != nil {
			return fmt.Errorf("build initramfs: %w", err)
		}
		manifest.WriteString(m.Name + "\n")
	}
	order := manifest.String()
	if err := c.File(strings.TrimPrefix(vminit.ModulesManifest, "/"), 0o644, int64(len(order)), strings.NewReader(order)); err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	return nil
}

// addFile adds the host file src as name.
func addFile(c *cpioWriter, name, src string, perm uint32) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	return c.File(name, perm, fi.Size(), f)
}
