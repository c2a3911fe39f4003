//go:build linux

package cgroup

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"warren/internal/mountinfo"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"sb-123_ABC", true},
		{"a", true},
		{strings.Repeat("x", maxNameLen), true},
		{strings.Repeat("x", maxNameLen+1), false},
		{"", false},
		{".", false},
		{"..", false},
		{"../etc", false},
		{"a/b", false},
		{"/abs", false},
		{"cgroup.procs", false},
		{"with space", false},
		{"nul\x00", false},
		{"tab\t", false},
		{"é", false},
		{"a\\b", false},
	} {
		err := validateName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("validateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("validateName(%q) = %v, want ErrInvalidName", tc.name, err)
		}
	}
}

func TestCreateRejectsBadNamesAndLimits(t *testing.T) {
	f := newFakeV2(t)
	if _, err := f.h.Create("../escape", Limits{}); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Create(../escape) = %v, want ErrInvalidName", err)
	}
	for _, l := range []Limits{
		{CPUs: -1},
		{CPUs: 0.001},
		{CPUs: math.NaN()},
		{CPUs: math.Inf(1)},
		{CPUs: maxCPUs + 1},
		{MemoryBytes: -1},
		{Pids: -1},
	} {
		if _, err := f.h.Create("sb", l); err == nil {
			t.Errorf("Create with %+v succeeded", l)
		}
	}
	if _, err := os.Stat(filepath.Join(f.root, "warren", "sb")); err == nil {
		t.Error("a rejected Create made its group")
	}
}

func TestCPUQuota(t *testing.T) {
	for _, tc := range []struct {
		cpus          float64
		quota, period int64
	}{
		{0.01, 1000, 100000}, // the kernel's minimum quota needs a longer period
		{0.05, 1000, 20000},
		{0.1, 1000, 10000},
		{0.5, 5000, 10000},
		{1, 10000, 10000},
		{2.25, 22500, 10000},
		{0.333, 3330, 10000},
	} {
		l := Limits{CPUs: tc.cpus}
		if q, p := l.cpuQuota(), l.cpuPeriod(); q != tc.quota || p != tc.period {
			t.Errorf("%v CPUs: quota %d per %d µs, want %d per %d", tc.cpus, q, p, tc.quota, tc.period)
		}
	}
}

func TestV1Mounts(t *testing.T) {
	const info = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:5 master:2 - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 30 0:32 / /sys/fs/cgroup/my\040pids rw,relatime - cgroup cgroup rw,pids
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
41 30 0:31 / /mnt/memory-again rw,relatime - cgroup cgroup rw,memory
`
	mounts, err := mountinfo.Parse(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	got := v1Mounts(mounts)
	want := map[string]string{
		"cpu":     "/sys/fs/cgroup/cpu,cpuacct",
		"cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
		"memory":  "/sys/fs/cgroup/memory",
		"pids":    "/sys/fs/cgroup/my pids",
		"freezer": "/sys/fs/cgroup/freezer",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("v1Mounts = %v, want %v", got, want)
	}
	h, err := newV1(got, nil)
	if err != nil {
		t.Fatal(err)
	}
	// cpu and cpuacct share a mount: one directory for both.
	if got := len(h.parents()); got != 4 {
		t.Errorf("%d parent dirs for 5 controllers on 4 mounts, want 4: %v", got, h.parents())
	}
}

func TestNewV1NamesMissingControllers(t *testing.T) {
	_, err := newV1(map[string]string{"cpu": "/c", "cpuacct": "/c", "memory": "/m"}, nil)
	if err == nil || !strings.Contains(err.Error(), "pids, freezer") {
		t.Errorf("newV1 without pids and freezer: err = %v, want one naming both", err)
	}
}

func TestReadKeyed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory.oom_control")
	if err := os.WriteFile(path, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int64{"oom_kill": 3, "under_oom": 0, "absent": 0} {
		if got, err := readKeyed(path, key); err != nil || got != want {
			t.Errorf("readKeyed(%s) = %d, %v; want %d", key, got, err, want)
		}
	}
}
