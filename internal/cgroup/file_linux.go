//go:build linux

package cgroup

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"warren/internal/mountinfo"

	"warren/internal/backoff"
)

// writeFile writes v to an existing control file in one write(2), as
// cgroupfs expects. It never creates the file: a missing control file means
// a controller is not there, which must fail loudly.
func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(v); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// readString reads a control file, without surrounding space.
func readString(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// parseCount parses a counter or a limit the kernel wrote: a non-negative
// integer.
func parseCount(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("negative count %d", n)
	}
	return n, nil
}

// readInt reads a control file holding one non-negative integer.
func readInt(path string) (int64, error) {
	s, err := readString(path)
	if err != nil {
		return 0, err
	}
	n, err := parseCount(s)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

// readKeyed reads the non-negative integer after key in a flat-keyed control file
// ("key value" lines, such as memory.events); a missing key reads as 0,
// as the kernel leaves out counters it has never had.
func readKeyed(path, key string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || k != key {
			continue
		}
		n, err := parseCount(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("parse %s in %s: %w", key, path, err)
		}
		return n, nil
	}
	return 0, nil
}

// pollWaits spaces the reads of a cgroup's state while waiting for it to
// change (emptied, frozen): 1 ms at first, backing off to 50 ms.
var pollWaits = backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}

// v1Mounts maps each v1 controller warren can use to the first place it is
// mounted.
func v1Mounts(mounts []mountinfo.Mount) map[string]string {
	m := make(map[string]string)
	for _, mt := range mounts {
		if mt.FSType != "cgroup" {
			continue
		}
		for _, opt := range mt.SuperOptions {
			if opt != "cpuset" && !slices.Contains(v1Controllers, opt) {
				continue
			}
			if _, ok := m[opt]; !ok {
				m[opt] = mt.Point
			}
		}
	}
	return m
}
