//go:build linux

package cgroup

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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

// readString reads a control file, without surrounding space.
func readString(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// readInt reads a control file holding one integer.
func readInt(path string) (int64, error) {
	s, err := readString(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

// readKeyed reads the integer after key in a flat-keyed control file
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
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s in %s: %w", key, path, err)
		}
		return n, nil
	}
	return 0, nil
}

// poll calls done until it reports true or fails, waiting 1 ms between
// calls at first and backing off to 50 ms; it returns ctx's error when ctx
// ends first.
func poll(ctx context.Context, done func() (bool, error)) error {
	delay := time.Millisecond
	for {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// mount is one line of /proc/self/mountinfo, the fields warren reads.
type mount struct {
	point     string
	fstype    string
	superOpts []string
}

// parseMountinfo parses the proc(5) mountinfo format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Optional fields end at the lone "-"; after it come the filesystem type,
// the source and the superblock options.
func parseMountinfo(r io.Reader) ([]mount, error) {
	var mounts []mount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+3 >= len(fields) {
			return nil, fmt.Errorf("parse mountinfo: malformed line %q", sc.Text())
		}
		mounts = append(mounts, mount{
			point:     unescapeOctal(fields[4]),
			fstype:    fields[sep+1],
			superOpts: strings.Split(fields[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse mountinfo: %w", err)
	}
	return mounts, nil
}

// v1Mounts maps each v1 controller warren can use to the first place it is
// mounted.
func v1Mounts(mounts []mount) map[string]string {
	m := make(map[string]string)
	for _, mt := range mounts {
		if mt.fstype != "cgroup" {
			continue
		}
		for _, opt := range mt.superOpts {
			if opt != "cpuset" && !slices.Contains(v1Controllers, opt) {
				continue
			}
			if _, ok := m[opt]; !ok {
				m[opt] = mt.point
			}
		}
	}
	return m
}

// unescapeOctal undoes the kernel's \ooo escaping of space, tab, newline
// and backslash in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
