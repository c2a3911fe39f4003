package mountinfo

import (
	"bufio"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want []Mount
	}{
		{
			name: "escaped paths and sources",
			text: `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
98 22 7:3 / /data/my\040disks rw,nosuid,nodev shared:50 master:2 - xfs /dev/loop3 rw,attr2
99 22 0:5 / /proc/x\134y rw - proc proc rw
100 22 0:6 / /mnt/a\011b rw - tmpfs my\040tmp rw
`,
			want: []Mount{
				{Point: "/", FSType: "ext4", Source: "/dev/vda", SuperOptions: []string{"rw"}},
				{Point: "/data/my disks", FSType: "xfs", Source: "/dev/loop3", SuperOptions: []string{"rw", "attr2"}},
				{Point: `/proc/x\y`, FSType: "proc", Source: "proc", SuperOptions: []string{"rw"}},
				{Point: "/mnt/a\tb", FSType: "tmpfs", Source: "my tmp", SuperOptions: []string{"rw"}},
			},
		},
		{
			name: "cgroup v1 controllers, co-mounted, and cgroup2",
			text: `31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:5 master:2 - cgroup cgroup rw,cpu,cpuacct
35 30 0:32 / /sys/fs/cgroup/my\040pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
`,
			want: []Mount{
				{Point: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", Source: "cgroup", SuperOptions: []string{"rw", "cpu", "cpuacct"}},
				{Point: "/sys/fs/cgroup/my pids", FSType: "cgroup", Source: "cgroup", SuperOptions: []string{"rw", "pids"}},
				{Point: "/sys/fs/cgroup/systemd", FSType: "cgroup", Source: "cgroup", SuperOptions: []string{"rw", "xattr", "name=systemd"}},
				{Point: "/sys/fs/cgroup/unified", FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw", "nsdelegate"}},
			},
		},
		{
			// mount -t tmpfs "" /mnt/empty: the kernel writes the empty
			// source as nothing between two spaces.
			name: "empty source",
			text: "50 22 0:40 / /mnt/empty rw - tmpfs  rw,size=64k\n",
			want: []Mount{{Point: "/mnt/empty", FSType: "tmpfs", Source: "", SuperOptions: []string{"rw", "size=64k"}}},
		},
		{
			name: "a backslash not followed by an octal byte stays",
			text: `51 22 0:41 / /mnt/a\9b\400\04 rw - tmpfs tmpfs rw` + "\n",
			want: []Mount{{Point: `/mnt/a\9b\400\04`, FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw"}}},
		},
		{
			name: "long superblock options",
			text: "60 22 0:50 / /merged rw - overlay overlay rw,lowerdir=" + strings.Repeat("/l", 100<<10) + "\n",
			want: []Mount{{Point: "/merged", FSType: "overlay", Source: "overlay", SuperOptions: []string{"rw", "lowerdir=" + strings.Repeat("/l", 100<<10)}}},
		},
		{name: "empty", text: "", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseMalformed(t *testing.T) {
	for _, line := range []string{
		"1 2 3:4 / /x rw",                 // no "-" separator
		"1 2 3:4 / /x rw no-separator",    // no "-" separator, optional field
		"1 2 3:4 / /x rw - ext4 /dev/vda", // no superblock options
		"1 2 3:4 / - rw ext4 /dev/vda rw", // "-" before the mount options
		"1 2 3:4 / /x rw shared:1 - ext4", // no source
	} {
		text := "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n" + line + "\n"
		_, err := Parse(strings.NewReader(text))
		if err == nil || !strings.Contains(err.Error(), "malformed line") || !strings.Contains(err.Error(), line) {
			t.Errorf("Parse(%q): err = %v, want one naming the malformed line", line, err)
		}
	}
}

func TestParseLineTooLong(t *testing.T) {
	text := "60 22 0:50 / /merged rw - overlay overlay rw,lowerdir=" + strings.Repeat("/l", 1<<20) + "\n"
	if _, err := Parse(strings.NewReader(text)); !errors.Is(err, bufio.ErrTooLong) {
		t.Errorf("Parse of a 2 MiB line: err = %v, want %v", err, bufio.ErrTooLong)
	}
}
