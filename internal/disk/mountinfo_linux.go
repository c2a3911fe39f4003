//go:build linux

package disk

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// mount is one line of /proc/self/mountinfo, reduced to what the pool needs.
type mount struct {
	point  string // where it is mounted, unescaped
	fsType string
	source string // e.g. /dev/loop3
}

// parseMountInfo parses the proc(5) mountinfo format, in mount order.
func parseMountInfo(r io.Reader) ([]mount, error) {
	var mounts []mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// id parent major:minor root point options [optional...] - type source superoptions
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			return nil, fmt.Errorf("parse mountinfo: malformed line %q", sc.Text())
		}
		mounts = append(mounts, mount{
			point:  unescapeMountField(fields[4]),
			fsType: fields[sep+1],
			source: unescapeMountField(fields[sep+2]),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse mountinfo: %w", err)
	}
	return mounts, nil
}

// unescapeMountField undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in mountinfo path fields.
func unescapeMountField(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountAt returns the topmost mount whose mount point is path, if any.
func mountAt(path string) (mount, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mount{}, false, err
	}
	defer f.Close()
	mounts, err := parseMountInfo(f)
	if err != nil {
		return mount{}, false, err
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].point == path {
			return mounts[i], true, nil
		}
	}
	return mount{}, false, nil
}
