//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	controlpb "warren/internal/agent/pb/control"
)

// Where a sandbox's resource use is read from.
//
// In a VM (Options.Guest), and in gVisor (Options.OwnKernel), the kernel is
// the sandbox's own: /proc/meminfo, /proc/stat and /proc/loadavg describe
// it whole.
//
// In a container the kernel is the host's, so /proc describes the host; the
// sandbox's figures are its cgroup's. The agent (its thread group leader, left
// in the sandbox's group when a spawning thread joins the work subgroup) is
// in its own cgroup namespace, whose root is that group, and the init mounts
// it read-only at /sys/fs/cgroup (containerinit). The group is found from
// /proc/self/cgroup and the controllers' mounts under /sys/fs/cgroup, which
// also serves an agent run as a plain process (tests): its figures are then
// those of the group it runs in. Without readable cgroup files the agent
// falls back to /proc.
const (
	procDir   = "/proc"
	cgroupDir = "/sys/fs/cgroup"
)

// Bounds of cpu_used_pct's window: without a previous sample younger than
// cpuSampleMaxAge (and at least cpuSampleMinAge old, for a window long enough
// to mean something), Metrics samples over cpuSampleWindow itself.
const (
	cpuSampleMaxAge = 60 * time.Second
	cpuSampleMinAge = 10 * time.Millisecond
	cpuSampleWindow = 100 * time.Millisecond
)

// userHz is the unit of /proc/stat's times (USER_HZ, 100 on every
// architecture Linux's ABI exposes it on).
const userHz = 100

// usage is the sandbox's resource use at one moment, but for the disk.
type usage struct {
	cpuNanos                    uint64 // CPU time used since the sandbox (or the VM's kernel) started
	cpuCount                    uint32
	memUsed, memTotal, memCache uint64
	pids                        uint64
}

// cpuMeter keeps the previous CPU sample, so that each Metrics call reports
// the CPU used since the one before.
type cpuMeter struct {
	mu    sync.Mutex // guards the fields below; held for a whole measure
	at    time.Time  // when nanos was read; zero before the first sample
	nanos uint64
}

// Metrics reports the sandbox's resource use.
func (h controlService) Metrics(ctx context.Context, req *connect.Request[controlpb.MetricsRequest]) (*connect.Response[controlpb.MetricsResponse], error) {
	read := func() (usage, error) { return readUsage(h.s.ownKernel()) }
	u, pct, err := h.s.cpu.measure(ctx, read)
	if err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("statfs /: %w", err))
	}
	bsize := uint64(st.Bsize)
	return connect.NewResponse(&controlpb.MetricsResponse{
		CpuUsedPct:     pct,
		CpuCount:       u.cpuCount,
		MemUsedBytes:   u.memUsed,
		MemTotalBytes:  u.memTotal,
		MemCacheBytes:  u.memCache,
		DiskUsedBytes:  (st.Blocks - st.Bfree) * bsize,
		DiskTotalBytes: st.Blocks * bsize,
		Pids:           u.pids,
	}), nil
}

// measure reads the usage and the share of the CPUs used since the previous
// sample, sampling over cpuSampleWindow first when that one is missing, too
// old or too recent.
func (m *cpuMeter) measure(ctx context.Context, read func() (usage, error)) (usage, float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := read()
	if err != nil {
		return usage{}, 0, connect.NewError(connect.CodeInternal, fmt.Errorf("read usage: %w", err))
	}
	now := time.Now()
	prevAt, prev := m.at, m.nanos
	if age := now.Sub(prevAt); prevAt.IsZero() || age > cpuSampleMaxAge || age < cpuSampleMinAge || u.cpuNanos < prev {
		prevAt, prev = now, u.cpuNanos
		t := time.NewTimer(cpuSampleWindow)
		select {
		case <-ctx.Done():
			t.Stop()
			return usage{}, 0, connect.NewError(connect.CodeCanceled, ctx.Err())
		case <-t.C:
		}
		if u, err = read(); err != nil {
			return usage{}, 0, connect.NewError(connect.CodeInternal, fmt.Errorf("read usage: %w", err))
		}
		now = time.Now()
	}
	m.at, m.nanos = now, u.cpuNanos
	return u, cpuPercent(u.cpuNanos-prev, now.Sub(prevAt), u.cpuCount), nil
}

// cpuPercent is used CPU time over wall time on count CPUs, in 0..100.
func cpuPercent(used uint64, wall time.Duration, count uint32) float64 {
	if wall <= 0 || count == 0 {
		return 0
	}
	pct := float64(used) / (float64(wall.Nanoseconds()) * float64(count)) * 100
	return math.Max(0, math.Min(100, pct))
}

// readUsage reads the VM's kernel figures when guest, else the agent's
// cgroup's, or the kernel's when the agent has no readable cgroup files.
func readUsage(guest bool) (usage, error) {
	if !guest {
		u, err := readCgroupUsage(cgroupDir)
		if !errors.Is(err, fs.ErrNotExist) {
			return u, err
		}
	}
	return readProcUsage(procDir)
}

// readProcUsage reads a kernel's figures from its /proc at dir.
func readProcUsage(dir string) (usage, error) {
	var u usage
	mem, err := readMeminfo(filepath.Join(dir, "meminfo"))
	if err != nil {
		return u, err
	}
	u.memTotal = mem["MemTotal"]
	u.memUsed = u.memTotal - min(u.memTotal, mem["MemAvailable"])
	u.memCache = mem["Cached"]
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return u, err
	}
	ticks, err := parseProcStatBusy(string(stat))
	if err != nil {
		return u, err
	}
	u.cpuNanos = ticks * (uint64(time.Second) / userHz)
	load, err := os.ReadFile(filepath.Join(dir, "loadavg"))
	if err != nil {
		return u, err
	}
	if u.pids, err = parseLoadavgTasks(string(load)); err != nil {
		return u, err
	}
	if u.pids == 0 {
		// gVisor's loadavg counts no tasks: count the processes' threads.
		u.pids = countTasks(dir)
	}
	u.cpuCount = uint32(runtime.NumCPU())
	return u, nil
}

// countTasks counts the threads of every process under the proc directory
// dir.
func countTasks(dir string) uint64 {
	procs, _ := os.ReadDir(dir)
	var n uint64
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		if tasks, err := os.ReadDir(filepath.Join(dir, p.Name(), "task")); err == nil {
			n += uint64(len(tasks))
		}
	}
	return n
}

// readCgroupUsage reads the figures of the agent's cgroup from the
// hierarchies mounted under root; an error wrapping fs.ErrNotExist when
// there is none to read (no cgroupfs, or the agent in the root group of v2,
// which has no memory.current).
func readCgroupUsage(root string) (usage, error) {
	self, err := os.ReadFile(filepath.Join(procDir, "self", "cgroup"))
	if err != nil {
		return usage{}, err
	}
	v1, v2, hasV2 := parseProcCgroup(string(self))
	mem, err := readMeminfo(filepath.Join(procDir, "meminfo"))
	if err != nil {
		return usage{}, err
	}
	if _, ok := v1["memory"]; ok {
		return readCgroupV1(func(c string) string { return filepath.Join(root, c, v1[c]) }, mem["MemTotal"])
	}
	if hasV2 {
		return readCgroupV2(filepath.Join(root, v2), mem["MemTotal"])
	}
	return usage{}, fmt.Errorf("no memory cgroup in /proc/self/cgroup: %w", fs.ErrNotExist)
}

// readCgroupV1 reads a v1 group whose directory in controller c is dir(c).
// hostMem is the machine's memory, the total when the group has no lower
// limit.
func readCgroupV1(dir func(c string) string, hostMem uint64) (usage, error) {
	var u usage
	memUsage, err := readUint(filepath.Join(dir("memory"), "memory.usage_in_bytes"))
	if err != nil {
		return u, err
	}
	limit, err := readUint(filepath.Join(dir("memory"), "memory.limit_in_bytes"))
	if err != nil {
		return u, err
	}
	stat, err := readKeyed(filepath.Join(dir("memory"), "memory.stat"))
	if err != nil {
		return u, err
	}
	u.memTotal = min(limit, hostMem)
	u.memUsed = memUsage - min(memUsage, stat["total_inactive_file"])
	u.memCache = stat["total_cache"]
	if u.cpuNanos, err = readUint(filepath.Join(dir("cpuacct"), "cpuacct.usage")); err != nil {
		return u, err
	}
	quota, err := readInt(filepath.Join(dir("cpu"), "cpu.cfs_quota_us"))
	if err != nil {
		return u, err
	}
	period, err := readInt(filepath.Join(dir("cpu"), "cpu.cfs_period_us"))
	if err != nil {
		return u, err
	}
	u.cpuCount = cpuCount(quota, period, runtime.NumCPU())
	u.pids, err = readPids(filepath.Join(dir("pids"), "pids.current"))
	return u, err
}

// readCgroupV2 reads the v2 group at dir.
func readCgroupV2(dir string, hostMem uint64) (usage, error) {
	var u usage
	memUsage, err := readUint(filepath.Join(dir, "memory.current"))
	if err != nil {
		return u, err
	}
	max, err := os.ReadFile(filepath.Join(dir, "memory.max"))
	if err != nil {
		return u, err
	}
	u.memTotal = hostMem
	if v := strings.TrimSpace(string(max)); v != "max" {
		limit, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return u, fmt.Errorf("parse memory.max: %w", err)
		}
		u.memTotal = min(limit, hostMem)
	}
	stat, err := readKeyed(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return u, err
	}
	u.memUsed = memUsage - min(memUsage, stat["inactive_file"])
	u.memCache = stat["file"]
	cpuStat, err := readKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return u, err
	}
	u.cpuNanos = cpuStat["usage_usec"] * uint64(time.Microsecond)
	cpuMax, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	if err != nil {
		return u, err
	}
	quota, period, err := parseCPUMax(string(cpuMax))
	if err != nil {
		return u, err
	}
	u.cpuCount = cpuCount(quota, period, runtime.NumCPU())
	u.pids, err = readPids(filepath.Join(dir, "pids.current"))
	return u, err
}

// readPids reads pids.current at path, or when the group has none (the
// root of v1's pids hierarchy) counts every task of the kernel.
func readPids(path string) (uint64, error) {
	n, err := readUint(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	load, err := os.ReadFile(filepath.Join(procDir, "loadavg"))
	if err != nil {
		return 0, err
	}
	return parseLoadavgTasks(string(load))
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

func readKeyed(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseKeyed(string(b)), nil
}

func readMeminfo(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseMeminfo(string(b)), nil
}
