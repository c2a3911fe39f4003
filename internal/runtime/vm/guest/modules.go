package guest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GuestModules are the modules a guest needs to reach its disk and the
// host, by name: the virtio PCI transport, the root disk, the agent's
// virtio-serial port, the entropy source and the network device
// (virtio_net, with net_failover and failover). Their dependencies (virtio,
// virtio_ring, the virtio_pci_*_dev helpers of 6.1) are not listed: they
// are found in the kernel's own dependency data. Debian's cloud kernel
// builds ext4, devtmpfs and the 8250 console in.
var GuestModules = []string{"virtio_pci", "virtio_blk", "virtio_console", "virtio_rng", "virtio_net"}

// Module is a loadable kernel module of a Kernel.
type Module struct {
	Name string // the module's name: underscores, no .ko ("virtio_rng")
	Path string // its file ("…/kernel/drivers/char/hw_random/virtio-rng.ko")
}

// Modules returns the modules named (and what they depend on) in load
// order: every module after its dependencies, the named ones in the order
// given, each once. A name that is built into the kernel is skipped.
//
// Dependencies come from modules.dep when the tree has one (depmod ran).
// Debian's package does not ship it (depmod runs when the package is
// installed, and the guest kernel is only extracted), so without it they
// come from each module's .modinfo "depends=" field, which is what modpost
// recorded from the same symbol resolution and what depmod would write.
func (k Kernel) Modules(names ...string) ([]Module, error) {
	paths, err := k.modulePaths()
	if err != nil {
		return nil, err
	}
	builtin, err := k.builtinModules()
	if err != nil {
		return nil, err
	}
	deps, err := k.depFile(paths)
	if err != nil {
		return nil, err
	}
	dependsOn := func(name string) ([]string, error) {
		if deps != nil {
			return deps[name], nil
		}
		return modinfoDepends(paths[name])
	}

	var order []Module
	state := make(map[string]int) // 1: being visited, 2: done
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("kernel modules: dependency cycle %s", strings.Join(append(chain, name), " -> "))
		case 2:
			return nil
		}
		path, ok := paths[name]
		if !ok {
			if builtin[name] {
				state[name] = 2
				return nil
			}
			return fmt.Errorf("kernel module %s: not in %s", name, k.ModulesDir)
		}
		state[name] = 1
		ds, err := dependsOn(name)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, Module{Name: name, Path: path})
		return nil
	}
	for _, n := range names {
		if err := visit(moduleName(n), nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleName is the kernel's name of a module file or name: no directory,
// no .ko, dashes as underscores.
func moduleName(s string) string {
	s = filepath.Base(s)
	s = strings.TrimSuffix(s, ".ko")
	return strings.ReplaceAll(s, "-", "_")
}

// modulePaths maps each loadable module's name to its file, from
// modules.order (every module the build made, relative to ModulesDir).
func (k Kernel) modulePaths() (map[string]string, error) {
	lines, err := readLines(filepath.Join(k.ModulesDir, "modules.order"))
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	paths := make(map[string]string, len(lines))
	for _, l := range lines {
		if !strings.HasSuffix(l, ".ko") {
			// Compressed modules (.ko.xz, .ko.zst) would need the kernel
			// to decompress; Debian's cloud kernel ships them plain.
			return nil, fmt.Errorf("kernel modules: %s: only uncompressed .ko modules are supported", l)
		}
		paths[moduleName(l)] = filepath.Join(k.ModulesDir, l)
	}
	return paths, nil
}

// builtinModules is the set of names modules.builtin lists (missing file:
// none).
func (k Kernel) builtinModules() (map[string]bool, error) {
	lines, err := readLines(filepath.Join(k.ModulesDir, "modules.builtin"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	set := make(map[string]bool, len(lines))
	for _, l := range lines {
		set[moduleName(l)] = true
	}
	return set, nil
}

// depFile reads modules.dep ("kernel/a.ko: kernel/b.ko kernel/c.ko") into
// each module's dependencies by name; nil when the tree has none.
func (k Kernel) depFile(paths map[string]string) (map[string][]string, error) {
	lines, err := readLines(filepath.Join(k.ModulesDir, "modules.dep"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	deps := make(map[string][]string, len(lines))
	for _, l := range lines {
		mod, rest, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("kernel modules: modules.dep: bad line %q", l)
		}
		var ds []string
		for d := range strings.FieldsSeq(rest) {
			ds = append(ds, moduleName(d))
		}
		deps[moduleName(mod)] = ds
	}
	return deps, nil
}

// modinfoDepends reads the "depends=" field of the module file's .modinfo
// section: the names of the modules it needs, comma-separated.
func modinfoDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kernel module: %w", err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("kernel module %s: no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: .modinfo: %w", path, err)
	}
	for field := range bytes.SplitSeq(data, []byte{0}) {
		v, ok := bytes.CutPrefix(field, []byte("depends="))
		if !ok {
			continue
		}
		var ds []string
		for d := range strings.SplitSeq(string(v), ",") {
			if d != "" {
				ds = append(ds, moduleName(d))
			}
		}
		return ds, nil
	}
	return nil, nil
}

// readLines returns the file's non-empty lines.
func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return lines, nil
}
