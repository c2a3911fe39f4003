//go:build linux

package gvisorinit

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// gVisor's kernel sizes its memory from the sandbox's host cgroup but does
// not hold its processes to it: a process that outgrows it drives the
// cgroup to its limit, and the host's OOM killer then kills the Sentry,
// the whole sandbox with its agent. The agent holds the limit itself, as
// the container runtime's cgroup would: once the memory in use (what
// gVisor's /proc/meminfo counts: every process's, the agent's, tmpfs)
// passes it, the largest process but the agent is killed with SIGKILL. The
// host cgroup leaves room above it for the Sentry's own memory (package
// gvisor), so a process growing between two looks is caught before that.

// Polling intervals: rare while memory is far from the limit, often near
// it; after a kill, long enough for the memory to come back (and for the
// agent, whose look at every process is dear in gVisor, to leave the
// sandbox's processes the CPU: under a fork bomb of small processes it
// otherwise did nothing else).
const (
	memoryIdle   = 100 * time.Millisecond
	memoryNear   = 20 * time.Millisecond
	memoryHot    = 5 * time.Millisecond
	memoryKilled = 25 * time.Millisecond
)

// holdMemory kills the largest process whenever the memory in use passes
// limit bytes. It never returns.
func holdMemory(limit int64, killed func(pid int, rss int64)) {
	buf := make([]byte, 4096)
	for {
		used, ok := memoryUsed(buf)
		switch {
		case ok && used > limit:
			if pid, rss := largest(); pid > 0 {
				unix.Kill(pid, unix.SIGKILL)
				killed(pid, rss)
			}
			time.Sleep(memoryKilled)
		case ok && used > limit*3/4:
			time.Sleep(memoryHot)
		case ok && used > limit/2:
			time.Sleep(memoryNear)
		default:
			time.Sleep(memoryIdle)
		}
	}
}

// memoryUsed is MemTotal - MemAvailable of /proc/meminfo, in bytes.
func memoryUsed(buf []byte) (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	n, _ := f.Read(buf)
	f.Close()
	total, ok1 := meminfoField(buf[:n], "MemTotal:")
	avail, ok2 := meminfoField(buf[:n], "MemAvailable:")
	return total - avail, ok1 && ok2
}

// meminfoField is the value of the kB field key in a meminfo text, in bytes.
func meminfoField(b []byte, key string) (int64, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+len(key):])
	if len(f) == 0 {
		return 0, false
	}
	kb, err := strconv.ParseInt(string(f[0]), 10, 64)
	return kb << 10, err == nil
}

// largest is the process other than the agent with the most resident
// memory, and that memory in bytes; pid 0 when there is none.
func largest() (pid int, rss int64) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	self := os.Getpid()
	for _, name := range names {
		p, err := strconv.Atoi(name)
		if err != nil || p == self {
			continue
		}
		if r := residentBytes(p); r > rss {
			pid, rss = p, r
		}
	}
	return pid, rss
}

// residentBytes is process pid's VmRSS, in bytes (0 when unknown).
func residentBytes(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := bytes.CutPrefix(s.Bytes(), []byte("VmRSS:")); ok {
			rss, _ := meminfoField(append([]byte("VmRSS:"), v...), "VmRSS:")
			return rss
		}
	}
	return 0
}
