//go:build linux

package agent

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestParseProcCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		v1       map[string]string
		v2       string
		hasV2    bool
	}{
		{"v1", "12:pids:/warren/a\n4:memory:/\n2:cpu,cpuacct:/\n1:name=systemd:/user.slice\n0::/\n",
			map[string]string{"pids": "/warren/a", "memory": "/", "cpu": "/", "cpuacct": "/"}, "/", true},
		{"v2", "0::/warren/sb-1\n", map[string]string{}, "/warren/sb-1", true},
		{"garbage", "nothing here\n3\n", map[string]string{}, "", false},
	} {
		v1, v2, hasV2 := parseProcCgroup(tc.in)
		if !maps.Equal(v1, tc.v1) || v2 != tc.v2 || hasV2 != tc.hasV2 {
			t.Errorf("%s: got %v %q %v, want %v %q %v", tc.name, v1, v2, hasV2, tc.v1, tc.v2, tc.hasV2)
		}
	}
}

func TestParseKeyed(t *testing.T) {
	in := "cache 22450176\ntotal_cache 22450176\ntotal_inactive_file 14864384\nbad line x\nusage_usec 123\n"
	want := map[string]uint64{"cache": 22450176, "total_cache": 22450176, "total_inactive_file": 14864384, "usage_usec": 123}
	if got := parseKeyed(in); !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseMeminfo(t *testing.T) {
	in := "MemTotal:        2028264 kB\nMemFree:          100000 kB\nMemAvailable:    1500000 kB\nCached:           300000 kB\nHugePages_Total:       0\n"
	want := map[string]uint64{"MemTotal": 2028264 << 10, "MemFree": 100000 << 10, "MemAvailable": 1500000 << 10, "Cached": 300000 << 10, "HugePages_Total": 0}
	if got := parseMeminfo(in); !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseProcStatBusy(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  10 2 3 1000 50 4 5 7 0 0\ncpu0 5 1 1 500 25 2 2 3 0 0\n", 10 + 2 + 3 + 4 + 5, false},
		{"cpu0 5 1 1 500 25 2 2 3 0 0\ncpu  1 1 1 1 1 1 1\n", 5, false},
		{"cpu  1 2 3\n", 0, true},
		{"intr 1 2 3\n", 0, true},
		{"cpu  1 2 x 4 5 6 7 8\n", 0, true},
	} {
		got, err := parseProcStatBusy(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%q: got %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseLoadavgTasks(t *testing.T) {
	if n, err := parseLoadavgTasks("0.00 0.01 0.05 1/123 4567\n"); n != 123 || err != nil {
		t.Errorf("got %d, %v; want 123", n, err)
	}
	for _, bad := range []string{"", "0.00 0.01 0.05", "0.00 0.01 0.05 1-2 3", "0.00 0.01 0.05 1/x 3"} {
		if _, err := parseLoadavgTasks(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseCPUMaxAndCount(t *testing.T) {
	for _, tc := range []struct {
		in      string
		online  int
		want    uint32
		wantErr bool
	}{
		{"max 100000\n", 8, 8, false},
		{"150000 100000\n", 8, 2, false},
		{"200000 100000", 8, 2, false},
		{"800000 100000", 4, 4, false},
		{"1000 100000", 4, 1, false},
		{"max", 4, 0, true},
		{"x 100000", 4, 0, true},
	} {
		quota, period, err := parseCPUMax(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil {
			if got := cpuCount(quota, period, tc.online); got != tc.want {
				t.Errorf("%q on %d CPUs: got %d, want %d", tc.in, tc.online, got, tc.want)
			}
		}
	}
	if got := cpuCount(-1, 100000, 2); got != 2 { // v1 cpu.cfs_quota_us -1
		t.Errorf("no v1 quota: got %d, want 2", got)
	}
}

func TestCPUPercent(t *testing.T) {
	for _, tc := range []struct {
		used  uint64
		wall  time.Duration
		count uint32
		want  float64
	}{
		{uint64(50 * time.Millisecond), 100 * time.Millisecond, 1, 50},
		{uint64(100 * time.Millisecond), 100 * time.Millisecond, 2, 50},
		{uint64(300 * time.Millisecond), 100 * time.Millisecond, 2, 100}, // clamped
		{0, 100 * time.Millisecond, 2, 0},
		{100, 0, 2, 0},
		{100, time.Second, 0, 0},
	} {
		if got := cpuPercent(tc.used, tc.wall, tc.count); got != tc.want {
			t.Errorf("cpuPercent(%d, %v, %d) = %v, want %v", tc.used, tc.wall, tc.count, got, tc.want)
		}
	}
}

// TestReadProcUsage reads this machine's kernel figures, as a VM's agent
// does.
func TestReadProcUsage(t *testing.T) {
	u, err := readProcUsage(procDir)
	if err != nil {
		t.Fatal(err)
	}
	if u.memTotal == 0 || u.memUsed == 0 || u.memUsed > u.memTotal || u.cpuNanos == 0 || u.cpuCount == 0 || u.pids == 0 {
		t.Errorf("usage %+v", u)
	}
}

// writeFiles writes name → content files under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadCgroupV1(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"memory/memory.usage_in_bytes": "300000000\n",
		"memory/memory.limit_in_bytes": "1073741824\n",
		"memory/memory.stat":           "cache 1000\ntotal_cache 50000000\ntotal_inactive_file 20000000\n",
		"cpuacct/cpuacct.usage":        "123456789\n",
		"cpu/cpu.cfs_quota_us":         "150000\n",
		"cpu/cpu.cfs_period_us":        "100000\n",
		"pids/pids.current":            "7\n",
	})
	u, err := readCgroupV1(func(c string) string { return filepath.Join(root, c) }, 8<<30)
	if err != nil {
		t.Fatal(err)
	}
	want := usage{cpuNanos: 123456789, cpuCount: min(2, uint32(runtime.NumCPU())), memUsed: 280000000, memTotal: 1 << 30, memCache: 50000000, pids: 7}
	if u != want {
		t.Errorf("got %+v, want %+v", u, want)
	}
	// No limit: v1 says the largest page-aligned number; the machine's
	// memory is the total.
	writeFiles(t, root, map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"})
	if u, err := readCgroupV1(func(c string) string { return filepath.Join(root, c) }, 8<<30); err != nil || u.memTotal != 8<<30 {
		t.Errorf("unlimited: total %d, %v; want %d", u.memTotal, err, 8<<30)
	}
	os.Remove(filepath.Join(root, "memory/memory.usage_in_bytes"))
	if _, err := readCgroupV1(func(c string) string { return filepath.Join(root, c) }, 8<<30); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("without memory.usage_in_bytes: %v, want fs.ErrNotExist", err)
	}
}

func TestReadCgroupV2(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"memory.current": "300000000\n",
		"memory.max":     "max\n",
		"memory.stat":    "anon 1000\nfile 50000000\ninactive_file 20000000\n",
		"cpu.stat":       "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
		"cpu.max":        "100000 100000\n",
		"pids.current":   "3\n",
	})
	u, err := readCgroupV2(dir, 2<<30)
	if err != nil {
		t.Fatal(err)
	}
	want := usage{cpuNanos: 1500000, cpuCount: 1, memUsed: 280000000, memTotal: 2 << 30, memCache: 50000000, pids: 3}
	if u != want {
		t.Errorf("got %+v, want %+v", u, want)
	}
	writeFiles(t, dir, map[string]string{"memory.max": "536870912\n"})
	if u, err := readCgroupV2(dir, 2<<30); err != nil || u.memTotal != 512<<20 {
		t.Errorf("limited: total %d, %v; want %d", u.memTotal, err, 512<<20)
	}
	// The root of v2 has no memory.current: not a group to read.
	os.Remove(filepath.Join(dir, "memory.current"))
	if _, err := readCgroupV2(dir, 2<<30); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("without memory.current: %v, want fs.ErrNotExist", err)
	}
}

// TestReadCgroupUsage reads the group this test runs in, where the machine
// has a cgroupfs.
func TestReadCgroupUsage(t *testing.T) {
	u, err := readCgroupUsage(cgroupDir)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no cgroup to read: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if u.memTotal == 0 || u.memUsed > u.memTotal || u.cpuNanos == 0 || u.cpuCount == 0 || u.pids == 0 {
		t.Errorf("usage %+v", u)
	}
}
