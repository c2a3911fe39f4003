package mountinfo

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse checks Parse on arbitrary text: it never panics, and what it
// accepts is one Mount per line, each with the mount point and filesystem
// type that proc(5) says every line has.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n98 22 7:3 / /data/my\\040disks rw,nosuid,nodev shared:50 master:2 - xfs /dev/loop3 rw,attr2\n",
		"31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:5 master:2 - cgroup cgroup rw,cpu,cpuacct\n",
		"50 22 0:40 / /mnt/empty rw - tmpfs  rw,size=64k\n",
		"51 22 0:41 / /mnt/a\\9b\\400\\04\\ rw - tmpfs tmpfs rw\n",
		"1 2 3:4 / /x rw - ext4 /dev/vda\n",
		"1 2 3:4 / - rw ext4 /dev/vda rw\n",
		"- - - - - - - - - -\n",
		"\n",
		"1 2 3:4 / /x rw - ext4 /dev/vda rw\r\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mounts, err := Parse(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		lines := strings.Count(string(data), "\n")
		if len(data) > 0 && data[len(data)-1] != '\n' {
			lines++
		}
		if len(mounts) != lines {
			t.Fatalf("Parse(%q): %d mounts from %d lines", data, len(mounts), lines)
		}
		for _, m := range mounts {
			if m.Point == "" || m.FSType == "" {
				t.Fatalf("Parse(%q) accepted %+v: a mount without a point or a filesystem type", data, m)
			}
			if len(m.SuperOptions) == 0 {
				t.Fatalf("Parse(%q) accepted %+v: no superblock options", data, m)
			}
		}
	})
}

// FuzzParseRoundTrip writes a mountinfo line as the kernel does, escaping
// space, tab, newline and backslash in the root, mount point and source as
// \ooo, and checks that Parse reads back the same Mount.
func FuzzParseRoundTrip(f *testing.F) {
	f.Add("/", "/", "ext4", "/dev/vda", "rw,errors=continue", uint8(1))
	f.Add("/", "/data/my disks", "xfs", "/dev/loop3", "rw,attr2", uint8(2))
	f.Add("/sub", `/proc/x\y`, "proc", "proc", "rw", uint8(0))
	f.Add("/", "/mnt/a\tb\nc", "tmpfs", "my tmp", "rw,size=64k", uint8(0))
	f.Add("/", "/mnt/empty", "tmpfs", "", "rw", uint8(0))
	f.Add("/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "cgroup", "rw,cpu,cpuacct", uint8(3))
	f.Add("/", "/merged", "overlay", "overlay", `rw,lowerdir=/l1:/l2,upperdir=/u\134x`, uint8(0))
	f.Add("/", `/a\040b`, "fuse.sshfs", `\`, "rw", uint8(0))
	f.Add("/ -", "/ - x", "ext4", "- ", "rw", uint8(4))
	f.Fuzz(func(t *testing.T, root, point, fstype, source, options string, optional uint8) {
		// The kernel writes no NUL in a path, and writes the type and the
		// superblock options without space, tab or newline (it escapes
		// them); Parse leaves those two fields as written.
		if point == "" || root == "" || fstype == "" || strings.ContainsRune(root+point+source, 0) ||
			strings.ContainsAny(fstype, " \t\n\\") || strings.ContainsAny(options, " \t\n") {
			return
		}
		want := Mount{Point: point, FSType: fstype, Source: source, SuperOptions: strings.Split(options, ",")}
		var opt strings.Builder
		for i := range int(optional % 5) {
			fmt.Fprintf(&opt, " shared:%d", i+1)
		}
		line := fmt.Sprintf("36 35 98:0 %s %s rw,noatime%s - %s %s %s\n",
			kernelEscape(root), kernelEscape(point), opt.String(), fstype, kernelEscape(source), options)
		text := "22 1 254:0 / / rw - ext4 /dev/vda rw\n" + line
		got, err := Parse(strings.NewReader(text))
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		if len(got) != 2 || !reflect.DeepEqual(got[1], want) {
			t.Fatalf("Parse(%q) = %+v, want [/ %+v]", text, got, want)
		}
	})
}

// kernelEscape escapes s as the kernel's mangle() does for mountinfo.
func kernelEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
