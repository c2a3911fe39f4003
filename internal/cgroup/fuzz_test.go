//go:build linux

package cgroup

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fuzzHierarchy is a hierarchy over plain directories, made once per fuzz
// target and rewritten by every input, for feeding the
// control-file parsers what the fuzzer writes: on v2 the unified root is
// dirs[0]; on v1 cpu and cpuacct are co-mounted at dirs[0] and the other
// controllers at dirs[1].
func fuzzHierarchy(t testing.TB, version int) (*Group, []string) {
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "cpu,cpuacct"), filepath.Join(root, "memory,pids,freezer")}
	h := &Hierarchy{version: version, root: dirs[0], mounts: map[string]string{}, log: subsystemLog(nil)}
	for _, c := range v1Controllers {
		h.mounts[c] = dirs[1]
	}
	h.mounts["cpu"], h.mounts["cpuacct"] = dirs[0], dirs[0]
	g := &Group{h: h, name: "fz"}
	for i, d := range dirs {
		dirs[i] = filepath.Join(d, parentDir, g.name)
		if err := os.MkdirAll(dirs[i], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return g, dirs
}

// putControl writes a fake control file.
func putControl(t *testing.T, dir, name, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzStats feeds Stats arbitrary control files of both versions. It never
// panics, and what it returns reads the files as the kernel writes them:
// counters the kernel keeps non-negative are non-negative, each is the
// number in its file (a keyed file's first line for the key), "max" and
// v1's page-aligned maximum are no limit, and the CPU time in nanoseconds
// is exactly v2's usage_usec × 1000.
func FuzzStats(f *testing.F) {
	f.Add(false, "268435456\n", "max\n", "3\n", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n", "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n")
	f.Add(false, "0", "536870912", "0", "user_usec 1\n", "")
	f.Add(false, " 7 ", "max", "1", "usage_usec   42  \n", "oom_kill_disable 0\noom_kill 2\n")
	f.Add(false, "1", "max", "1", "usage_usec 9223372036854775\n", "oom_kill 0\n")
	f.Add(false, "x", "max", "1", "", "")
	f.Add(false, "1", "maxx", "1", "", "")
	f.Add(false, "1", "max", "1", "usage_usec x\nusage_usec 5\n", "")
	f.Add(true, "1048576\n", "9223372036854771712\n", "2\n", "123456789\n", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
	f.Add(true, "1048576\n", "268435456\n", "2\n", "0\n", "oom_kill_disable 0\nunder_oom 0\n")
	f.Add(true, "", "", "", "", "")
	g2, dirs2 := fuzzHierarchy(f, 2)
	g1, dirs1 := fuzzHierarchy(f, 1)
	f.Fuzz(func(t *testing.T, v1 bool, memCurrent, memMax, pids, cpu, events string) {
		version, g, dirs := 2, g2, dirs2
		if v1 {
			version, g, dirs = 1, g1, dirs1
		}
		cpuDir, memDir := dirs[0], dirs[1]
		if version == 2 {
			memDir = cpuDir
			putControl(t, memDir, "memory.current", memCurrent)
			putControl(t, memDir, "memory.max", memMax)
			putControl(t, memDir, "pids.current", pids)
			putControl(t, memDir, "cpu.stat", cpu)
			putControl(t, memDir, "memory.events", events)
		} else {
			putControl(t, memDir, "memory.usage_in_bytes", memCurrent)
			putControl(t, memDir, "memory.limit_in_bytes", memMax)
			putControl(t, memDir, "pids.current", pids)
			putControl(t, cpuDir, "cpuacct.usage", cpu)
			putControl(t, memDir, "memory.oom_control", events)
		}
		s, err := g.Stats()
		if err != nil {
			return
		}
		files := []string{memCurrent, memMax, pids, cpu, events}
		usec := keyedInt(cpu, "usage_usec")
		if version == 2 && usec > math.MaxInt64/1000 {
			t.Fatalf("v2 files %q: usage_usec %d µs is more nanoseconds than an int64 holds, yet Stats = %+v", files, usec, s)
		}
		if s.MemoryBytes < 0 || s.MemoryLimit < 0 || s.Pids < 0 || s.CPUUsageNanos < 0 || s.OOMKills < 0 {
			t.Fatalf("v%d files %q: Stats = %+v, a negative counter", version, files, s)
		}
		want := Stats{MemoryBytes: plainInt(memCurrent), Pids: plainInt(pids), OOMKills: keyedInt(events, "oom_kill")}
		limit := strings.TrimSpace(memMax)
		switch {
		case version == 2 && limit == "max":
		case version == 1 && plainInt(limit) >= v1NoLimit():
		default:
			want.MemoryLimit = plainInt(limit)
		}
		if version == 2 {
			want.CPUUsageNanos = usec * 1000
		} else {
			want.CPUUsageNanos = plainInt(cpu)
		}
		if s != want {
			t.Fatalf("v%d files %q: Stats = %+v, want %+v", version, files, s, want)
		}
	})
}

// plainInt is the integer a one-number control file holds.
func plainInt(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}

// keyedInt is the integer on the first "key value" line of a flat-keyed
// control file, 0 when no line has the key.
func keyedInt(s, key string) int64 {
	for line := range strings.Lines(s) {
		f := strings.SplitN(strings.TrimSpace(line), " ", 2)
		if len(f) == 2 && f[0] == key {
			return plainInt(f[1])
		}
	}
	return 0
}

// FuzzProcs feeds Procs arbitrary cgroup.procs files (on v1, one per
// distinct mount). It never panics, and what it returns is every number
// of the files, each once, sorted, and all valid pids (positive): the
// kernel lists only live processes.
func FuzzProcs(f *testing.F) {
	f.Add(false, "1\n42\n7\n", "")
	f.Add(false, "", "")
	f.Add(true, "10\n20\n", "20\n30\n10\n")
	f.Add(true, "", "5\n")
	f.Add(true, "1 2\t3", "")
	f.Add(false, "1\nx\n", "")
	f.Add(false, "99999999999999999999\n", "")
	g2, dirs2 := fuzzHierarchy(f, 2)
	g1, dirs1 := fuzzHierarchy(f, 1)
	f.Fuzz(func(t *testing.T, v1 bool, procs, procs2 string) {
		version, g, dirs, files := 2, g2, dirs2, []string{procs}
		if v1 {
			version, g, dirs, files = 1, g1, dirs1, []string{procs, procs2}
		}
		for i, data := range files {
			putControl(t, dirs[i], "cgroup.procs", data)
		}
		got, err := g.Procs()
		if err != nil {
			return
		}
		var want []int
		for _, data := range files {
			for _, tok := range strings.Fields(data) {
				n, err := strconv.Atoi(tok)
				if err != nil {
					t.Fatalf("v%d files %q: Procs = %v, accepting %q", version, files, got, tok)
				}
				want = append(want, n)
			}
		}
		slices.Sort(want)
		want = slices.Compact(want)
		if !slices.Equal(got, want) {
			t.Fatalf("v%d files %q: Procs = %v, want %v", version, files, got, want)
		}
		if len(got) > 0 && got[0] <= 0 {
			t.Fatalf("v%d files %q: Procs = %v, holding a pid that is not positive", version, files, got)
		}
	})
}
