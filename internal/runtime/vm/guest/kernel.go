// Package guest prepares what a microVM boots: it finds the guest kernel
// that scripts/deps.sh extracted from Debian's cloud kernel package, works
// out which of its modules the guest needs and in which order, and builds
// the initramfs whose /init is the static guest agent (which then runs
// package vminit's Setup as PID 1).
//
// It runs on the host and touches nothing it is not given: no VMM, no
// disks. Starting and supervising the VMM is the VM runtime's job.
package guest

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DefaultDir is where scripts/deps.sh extracts guest kernels, one
// directory per kernel release.
const DefaultDir = "/var/cache/warren/guest-kernel"

// ErrNoKernel means no extracted guest kernel was found.
var ErrNoKernel = errors.New("no guest kernel")

// Kernel is an extracted guest kernel.
type Kernel struct {
	// Version is the kernel release (uname -r), e.g. 6.1.0-57-cloud-amd64.
	Version string
	// Vmlinuz is the kernel image to boot.
	Vmlinuz string
	// ModulesDir is its module tree (modules.order, kernel/...).
	ModulesDir string
}

// Find returns the guest kernel in dir: dir itself when it holds a vmlinuz
// (one extracted release: dir/vmlinuz and dir/lib/modules/RELEASE), else the
// newest release among dir's subdirectories (DefaultDir's layout). The
// error wraps ErrNoKernel when there is none.
func Find(dir string) (Kernel, error) {
	if k, err := release(dir); err == nil {
		return k, nil
	} else if !errors.Is(err, ErrNoKernel) {
		return Kernel{}, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Kernel{}, fmt.Errorf("find guest kernel: %w", err)
	}
	var found []Kernel
	for _, e := range entries {
		if !e.IsDir() || e.Name()[0] == '.' { // .RELEASE.tmp: an extraction in progress
			continue
		}
		k, err := release(filepath.Join(dir, e.Name()))
		if errors.Is(err, ErrNoKernel) {
			continue
		}
		if err != nil {
			return Kernel{}, err
		}
		found = append(found, k)
	}
	if len(found) == 0 {
		return Kernel{}, fmt.Errorf("%w in %s: run scripts/deps.sh, which extracts Debian's linux-image-cloud-amd64 there", ErrNoKernel, dir)
	}
	return slices.MaxFunc(found, func(a, b Kernel) int { return compareVersions(a.Version, b.Version) }), nil
}

// release reads one extracted release directory.
func release(dir string) (Kernel, error) {
	vmlinuz := filepath.Join(dir, "vmlinuz")
	if _, err := os.Stat(vmlinuz); errors.Is(err, os.ErrNotExist) {
		return Kernel{}, ErrNoKernel
	} else if err != nil {
		return Kernel{}, fmt.Errorf("find guest kernel: %w", err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "lib/modules"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Kernel{}, fmt.Errorf("find guest kernel: %w", err)
	}
	var versions []string
	for _, e := range entries {
		if e.IsDir() {
			versions = append(versions, e.Name())
		}
	}
	if len(versions) != 1 {
		return Kernel{}, fmt.Errorf("guest kernel %s: want one release in lib/modules, found %d", dir, len(versions))
	}
	return Kernel{
		Version:    versions[0],
		Vmlinuz:    vmlinuz,
		ModulesDir: filepath.Join(dir, "lib/modules", versions[0]),
	}, nil
}

// compareVersions orders kernel releases: runs of digits compare as
// numbers, everything else byte by byte (6.1.0-57 after 6.1.0-9).
func compareVersions(a, b string) int {
	for a != "" && b != "" {
		na, ra := leadingRun(a)
		nb, rb := leadingRun(b)
		if c := compareRun(na, nb); c != 0 {
			return c
		}
		a, b = ra, rb
	}
	return cmp.Compare(len(a), len(b))
}

// leadingRun splits s after its first run of digits or of non-digits.
func leadingRun(s string) (string, string) {
	digit := isDigit(s[0])
	i := 1
	for i < len(s) && isDigit(s[i]) == digit {
		i++
	}
	return s[:i], s[i:]
}

func compareRun(a, b string) int {
	if isDigit(a[0]) && isDigit(b[0]) {
		x, errx := strconv.ParseUint(a, 10, 64)
		y, erry := strconv.ParseUint(b, 10, 64)
		if errx == nil && erry == nil {
			return cmp.Compare(x, y)
		}
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
