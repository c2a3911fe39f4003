// Package imagefmt names the format of a runtime's memory images
// (runtime.Imager.ImageFormat): what must be the same on the node that
// restores an image as on the node that saved it. A memory image holds its
// runtime's own state (a QEMU's devices, a gVisor Sentry's kernel), the
// agent that ran in it, and code that chose its paths by the CPU's
// features, so the format is the runtime's name, sums of the files that
// make it, and the host CPU's vendor, model and feature flags.
package imagefmt

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// Of is the format of runtime's images on this host: runtime, parts (its
// version, accelerator and the like), the SHA-256 of each file (its
// binaries), and the CPU's. An error says which file or CPU fact could not
// be read.
func Of(runtime string, parts []string, files ...string) (string, error) {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%s\x00", p)
	}
	for _, f := range files {
		if err := sumFile(h, f); err != nil {
			return "", fmt.Errorf("memory image format: %w", err)
		}
	}
	cpu, err := cpuFacts("/proc/cpuinfo")
	if err != nil {
		return "", fmt.Errorf("memory image format: %w", err)
	}
	io.WriteString(h, cpu)
	return runtime + "-" + hex.EncodeToString(h.Sum(nil))[:24], nil
}

func sumFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(h, f)
	return err
}

// cpuFacts is the vendor, family, model and flags of the first processor
// in cpuinfo (a /proc/cpuinfo).
func cpuFacts(cpuinfo string) (string, error) {
	f, err := os.Open(cpuinfo)
	if err != nil {
		return "", err
	}
	defer f.Close()
	facts := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" && len(facts) > 0 {
			break // the first processor's block ends
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k = strings.TrimSpace(k); k {
		case "vendor_id", "cpu family", "model", "flags":
			facts[k] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if facts["flags"] == "" {
		return "", fmt.Errorf("%s names no CPU flags", cpuinfo)
	}
	return fmt.Sprintf("%s\x00%s\x00%s\x00%s", facts["vendor_id"], facts["cpu family"], facts["model"], facts["flags"]), nil
}
