package agent

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The parsers of the kernel files Metrics reads (metrics_linux.go): pure
// functions over the files' text.

// parseProcCgroup parses /proc/self/cgroup: the group's path in each v1
// controller (named hierarchies such as name=systemd left out), and in the
// v2 hierarchy when hasV2.
func parseProcCgroup(s string) (v1 map[string]string, v2 string, hasV2 bool) {
	v1 = make(map[string]string)
	for line := range strings.Lines(s) {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && ctrls == "" {
			v2, hasV2 = path, true
			continue
		}
		for c := range strings.SplitSeq(ctrls, ",") {
			if c != "" && !strings.HasPrefix(c, "name=") {
				v1[c] = path
			}
		}
	}
	return v1, v2, hasV2
}

// parseKeyed parses "key value" lines (memory.stat, cpu.stat); lines that
// are not a key and an unsigned number are left out.
func parseKeyed(s string) map[string]uint64 {
	m := make(map[string]uint64)
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}

// parseMeminfo parses /proc/meminfo into bytes ("MemTotal:  16384 kB").
func parseMeminfo(s string) map[string]uint64 {
	m := make(map[string]uint64)
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		m[k] = n
	}
	return m
}

// parseProcStatBusy returns the CPU time all CPUs spent busy, in USER_HZ
// ticks, from /proc/stat's "cpu" line: user, nice, system, irq and softirq
// (guest time is in user already; idle, iowait and steal are not the
// sandbox's work).
func parseProcStatBusy(s string) (uint64, error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 8 {
			return 0, fmt.Errorf("parse /proc/stat: cpu line has %d fields", len(f))
		}
		var busy uint64
		for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse /proc/stat: %w", err)
			}
			busy += n
		}
		return busy, nil
	}
	return 0, errors.New("parse /proc/stat: no cpu line")
}

// parseLoadavgTasks returns the number of tasks in /proc/loadavg ("0.00
// 0.01 0.05 1/123 4567": 123).
func parseLoadavgTasks(s string) (uint64, error) {
	f := strings.Fields(s)
	if len(f) < 4 {
		return 0, fmt.Errorf("parse /proc/loadavg %q", s)
	}
	_, total, ok := strings.Cut(f[3], "/")
	n, err := strconv.ParseUint(total, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("parse /proc/loadavg %q", s)
	}
	return n, nil
}

// parseCPUMax parses v2's cpu.max ("max 100000", "150000 100000"); quota
// -1 means no limit.
func parseCPUMax(s string) (quota, period int64, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("parse cpu.max %q", s)
	}
	if period, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("parse cpu.max %q: %w", s, err)
	}
	if f[0] == "max" {
		return -1, period, nil
	}
	if quota, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("parse cpu.max %q: %w", s, err)
	}
	return quota, period, nil
}

// cpuCount is how many CPUs a quota per period allows, rounded up, at most
// online; online without a quota.
func cpuCount(quota, period int64, online int) uint32 {
	n := int64(online)
	if quota > 0 && period > 0 {
		n = min(n, (quota+period-1)/period)
	}
	return uint32(max(n, 1))
}
