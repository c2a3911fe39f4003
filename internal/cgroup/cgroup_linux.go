//go:build linux

// Package cgroup puts one sandbox under CPU, memory and process-count limits
// with Linux control groups, on cgroup v1 and on cgroup v2, and kills and
// removes everything in it when the sandbox ends.
//
// Every group lives under "warren/" in each hierarchy warren uses:
// /sys/fs/cgroup/warren/<name> on v2, /sys/fs/cgroup/<controller>/warren/<name>
// on v1: at the root of each hierarchy, not below the daemon's own group,
// so that they do not depend on where the daemon runs and outlive it. On v2 this needs
// warren/'s parent to hold no processes (the "no internal processes" rule):
// true of a host's root cgroup, not of a container's cgroup namespace root,
// where enabling controllers fails with EBUSY.
//
// The package is for the node daemon, which runs as root. It is not a
// general cgroup library (no io, devices or hugetlb control, no delegation to
// unprivileged users, no systemd integration) and it does not isolate anything
// by itself: namespaces and seccomp do that.
//
// # Invariants
//
// The processes in a group are hostile. What keeps them in bounds:
//
//   - Group names are validated (letters, digits, '_' and '-', at most 128
//     bytes), so a name can never climb out of warren/ or name a control file.
//   - Limits are written before Create returns, so a process added with AddProc
//     is limited from its first instruction. It must be in before it runs
//     untrusted code (the container runtime adds its init while that init
//     still waits for its root, before it execs anything). A group made
//     ahead of its sandbox (the runtime's warm inits) gets its limits with
//     Limit before its process is handed anything to run.
//   - With a memory limit, swap is capped too (v1 memory.memsw.limit_in_bytes =
//     the limit, v2 memory.swap.max = 0): a sandbox cannot push its memory to
//     swap and so escape the limit. When the kernel has no swap accounting the
//     files are missing; the hierarchy logs a warning once.
//   - pids.max counts tasks (threads too), and the kernel fails fork and clone
//     past it: a fork bomb stays inside its group.
//   - Kill never signals a process outside the group, even when a PID is
//     reused: it uses cgroup.kill (atomic in the kernel), or signals through
//     pidfds confirmed to belong to group members (see signalAll). It freezes
//     the group first, so that a fork bomb cannot outrun it.
//   - The sandbox must never see a writable cgroupfs: its own group's files
//     would let it raise its limits. The container runtime must not mount one
//     (its init mounts the sandbox's group read-only, in the sandbox's cgroup
//     namespace, for the agent's metrics).
//
// A Hierarchy does not change after Detect and is safe for concurrent use; so are
// Groups. Creating the same name concurrently makes exactly one Create succeed.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"warren/internal/mountinfo"
)

// Errors returned by this package, testable with errors.Is.
var (
	// ErrExists means Create found a group of that name already there.
	ErrExists = errors.New("cgroup exists")
	// ErrNotFound means Open found no group of that name.
	ErrNotFound = errors.New("cgroup not found")
	// ErrInvalidName means a group name is empty, too long or has a character
	// other than ASCII letters, digits, '_' and '-'.
	ErrInvalidName = errors.New("invalid cgroup name")
)

// parentDir is the directory, in every hierarchy, that holds warren's groups.
const parentDir = "warren"

// maxNameLen bounds group names well below the 255-byte limit of a path
// component.
const maxNameLen = 128

// cfsPeriod is the CPU bandwidth period in microseconds, 10 ms rather than
// the kernel's 100 ms: a group of half a CPU with many threads may burn
// every core until its quota is spent, and then waits out the period, so
// the period bounds how long its neighbours wait behind it (a burst of
// 25 ms on 2 cores at 100 ms; 2.5 ms at 10 ms). A group too small for the
// kernel's minimum quota in it gets a longer one (Limits.cpuPeriod).
const cfsPeriod = 10000

// minQuota is the smallest CPU quota, in microseconds, the kernel accepts.
const minQuota = 1000

// minCPUs is the smallest CPU limit: a quota of minQuota in a period of
// 100 ms.
const minCPUs = 0.01

// maxCPUs bounds Limits.CPUs far above any host, so that the quota always
// fits the kernel's range.
const maxCPUs = 4096

// Limits are the resource limits of one group. A zero field means no limit.
type Limits struct {
	// CPUs is CPU bandwidth in cores, such as 0.5 or 2: the group may use
	// CPUs*100 ms of CPU time every 100 ms. At least 0.01 when set.
	CPUs float64
	// MemoryBytes caps memory, page cache included, and swap is capped with
	// it. Going over it invokes the OOM killer inside the group.
	MemoryBytes int64
	// Pids caps the number of tasks (processes and threads) in the group.
	Pids int64
}

func (l Limits) validate() error {
	switch {
	case math.IsNaN(l.CPUs) || l.CPUs < 0 || l.CPUs > maxCPUs:
		return fmt.Errorf("cpus %v out of range [0, %d]", l.CPUs, maxCPUs)
	case l.CPUs > 0 && l.CPUs < minCPUs:
		return fmt.Errorf("cpus %v below the minimum of %g", l.CPUs, minCPUs)
	case l.MemoryBytes < 0:
		return fmt.Errorf("memory %d is negative", l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("pids %d is negative", l.Pids)
	}
	return nil
}

// cpuPeriod is the CFS period in microseconds for l: cfsPeriod, or as
// long as the kernel's minimum quota needs at l.CPUs.
func (l Limits) cpuPeriod() int64 {
	return max(cfsPeriod, int64(math.Ceil(minQuota/l.CPUs)))
}

// cpuQuota is the CFS quota in microseconds per cpuPeriod.
func (l Limits) cpuQuota() int64 {
	return int64(math.Round(l.CPUs * float64(l.cpuPeriod())))
}

// Stats is a group's resource use.
type Stats struct {
	// MemoryBytes is the memory charged to the group now, page cache included.
	MemoryBytes int64
	// MemoryLimit is the memory limit in force, 0 if there is none.
	MemoryLimit int64
	// Pids is the number of tasks in the group.
	Pids int64
	// CPUUsageNanos is the CPU time the group's tasks have used.
	CPUUsageNanos int64
	// OOMKills counts processes the OOM killer killed in the group.
	OOMKills int64
}

// v1Controllers are the v1 controllers a group must be in, in the order
// their directories are made. cpuset is added when it is mounted.
var v1Controllers = []string{"cpu", "cpuacct", "memory", "pids", "freezer"}

// v2Controllers are the controllers enabled for warren's groups on v2.
var v2Controllers = []string{"cpu", "memory", "pids"}

// Hierarchy is the cgroup hierarchy of this host, v1 or v2.
type Hierarchy struct {
	version int
	// root is the v2 mount point.
	root string
	// mounts maps each v1 controller warren uses to its mount point;
	// co-mounted controllers (cpu,cpuacct) share one.
	mounts map[string]string
	log    *slog.Logger

	// mkdir and rmdir make and remove one cgroup directory. On cgroupfs the
	// kernel fills a new directory with its control files and rmdir removes
	// them; the v2 tests replace both with a temp-dir fake that does the same.
	mkdir func(path string) error
	rmdir func(path string) error

	// swapWarn makes the warning that memory limits do not cover swap appear
	// once per hierarchy.
	swapWarn sync.Once
}

// Detect finds the host's cgroup hierarchy: v2 when /sys/fs/cgroup is the
// unified hierarchy, otherwise the v1 controllers mounted anywhere, as listed
// in /proc/self/mountinfo. A hybrid host (v1 controllers plus an empty
// cgroup2 at /sys/fs/cgroup/unified) is v1. A nil log discards logs.
func Detect(log *slog.Logger) (*Hierarchy, error) {
	const unified = "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(unified, "cgroup.controllers")); err == nil {
		return DetectAt(unified, 2, log)
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, fmt.Errorf("detect cgroups: %w", err)
	}
	return newV1(v1Mounts(mounts), log)
}

// DetectAt is Detect over an explicit root: for version 2 the unified mount
// point, for version 1 a directory holding one directory per controller
// mount, named for its controllers (cpu, memory, "cpu,cpuacct"…), as
// /sys/fs/cgroup does on v1 hosts.
func DetectAt(root string, version int, log *slog.Logger) (*Hierarchy, error) {
	switch version {
	case 1:
		entries, err := os.ReadDir(root)
		if err != nil {
			return nil, fmt.Errorf("detect cgroup v1: %w", err)
		}
		mounts := make(map[string]string)
		for _, e := range entries {
			dir, err := filepath.EvalSymlinks(filepath.Join(root, e.Name()))
			if err != nil {
				continue
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				continue
			}
			for _, c := range strings.Split(e.Name(), ",") {
				if _, ok := mounts[c]; !ok {
					mounts[c] = dir
				}
			}
		}
		return newV1(mounts, log)
	case 2:
		return newV2(root, log)
	default:
		return nil, fmt.Errorf("detect cgroups: version %d is neither 1 nor 2", version)
	}
}

func newV1(mounts map[string]string, log *slog.Logger) (*Hierarchy, error) {
	log = subsystemLog(log)
	h := &Hierarchy{version: 1, mounts: make(map[string]string), log: log, mkdir: mkdirOne, rmdir: os.Remove}
	var missing []string
	for _, c := range v1Controllers {
		if m, ok := mounts[c]; ok {
			h.mounts[c] = m
		} else {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no usable cgroup hierarchy: /sys/fs/cgroup is not cgroup v2, and cgroup v1 lacks controllers %s", strings.Join(missing, ", "))
	}
	if m, ok := mounts["cpuset"]; ok {
		h.mounts["cpuset"] = m
	}
	log.Info("cgroup hierarchy detected", "version", 1, "mounts", h.mounts)
	return h, nil
}

func newV2(root string, log *slog.Logger) (*Hierarchy, error) {
	log = subsystemLog(log)
	data, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("detect cgroup v2: %w", err)
	}
	have := strings.Fields(string(data))
	var missing []string
	for _, c := range v2Controllers {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no usable cgroup hierarchy: cgroup v2 at %s lacks controllers %s", root, strings.Join(missing, ", "))
	}
	log.Info("cgroup hierarchy detected", "version", 2, "root", root)
	return &Hierarchy{version: 2, root: root, log: log, mkdir: mkdirOne, rmdir: os.Remove}, nil
}

func subsystemLog(log *slog.Logger) *slog.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return log.With("subsystem", "cgroup")
}

func mkdirOne(path string) error { return os.Mkdir(path, 0o755) }

// Version is 1 or 2.
func (h *Hierarchy) Version() int { return h.version }

// parents are the directories holding warren's groups, one per distinct
// mount, in creation order.
func (h *Hierarchy) parents() []string {
	if h.version == 2 {
		return []string{filepath.Join(h.root, parentDir)}
	}
	var dirs []string
	for _, c := range h.v1Order() {
		d := filepath.Join(h.mounts[c], parentDir)
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// v1Order lists the controllers in use, cpuset first: a v1 cpuset group
// must have CPUs and memory nodes before anything else can use it.
func (h *Hierarchy) v1Order() []string {
	if _, ok := h.mounts["cpuset"]; ok {
		return append([]string{"cpuset"}, v1Controllers...)
	}
	return v1Controllers
}

// Create makes group warren/<name> in every controller warren uses, with the
// limits l written before it returns. A group that already exists, even in
// one controller only, is ErrExists. On failure nothing Create made for the
// group is left behind (the shared warren/ parents stay).
func (h *Hierarchy) Create(name string, l Limits) (*Group, error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	if err := h.prepareParents(); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	g := &Group{h: h, name: name}
	// made is the cleanup stack: the directories this call created, undone
	// in reverse on any failure.
	var made []string
	undo := func() {
		for _, d := range slices.Backward(made) {
			if err := h.rmdir(d); err != nil {
				h.log.Error("undo cgroup create", "name", name, "dir", d, "err", err)
			}
		}
	}
	for _, d := range g.dirs() {
		if err := h.mkdir(d); err != nil {
			undo()
			if errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("create cgroup %s: %w", name, ErrExists)
			}
			return nil, fmt.Errorf("create cgroup %s: %w", name, err)
		}
		made = append(made, d)
	}
	if err := h.setLimits(g, l); err != nil {
		undo()
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	h.log.Debug("cgroup created", "name", name, "cpus", l.CPUs, "memory", l.MemoryBytes, "pids", l.Pids)
	return g, nil
}

// LimitAll sets limits l on warren/ itself, which holds every sandbox of
// every warren server on the host: together they can then never take the
// memory or pids the host keeps for itself. CPUs in l are ignored.
func (h *Hierarchy) LimitAll(l Limits) error {
	l.CPUs = 0
	if err := l.validate(); err != nil {
		return fmt.Errorf("limit cgroup %s: %w", parentDir, err)
	}
	if err := h.prepareParents(); err != nil {
		return fmt.Errorf("limit cgroup %s: %w", parentDir, err)
	}
	// The group of name "" is warren/ itself. On v1 memsw may never be
	// below the memory limit, which an earlier start may have set lower
	// than this one's: lift it first.
	g := &Group{h: h}
	if h.version == 1 && l.MemoryBytes > 0 && g.exists("memory", "memory.memsw.limit_in_bytes") {
		if err := g.write("memory", "memory.memsw.limit_in_bytes", -1); err != nil {
			return fmt.Errorf("limit cgroup %s: lift swap limit: %w", parentDir, err)
		}
	}
	if err := h.setLimits(g, l); err != nil {
		return fmt.Errorf("limit cgroup %s: %w", parentDir, err)
	}
	h.log.Info("sandboxes bounded in all", "memory", l.MemoryBytes, "pids", l.Pids)
	return nil
}

// prepareParents makes warren/ in every hierarchy if missing and readies it
// for children: v1 cpuset needs CPUs and memory nodes, v2 needs the
// controllers enabled on the way down.
func (h *Hierarchy) prepareParents() error {
	if h.version == 2 {
		if err := enableControllers(h.root); err != nil {
			return err
		}
		p := filepath.Join(h.root, parentDir)
		if err := h.mkdir(p); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return enableControllers(p)
	}
	for _, p := range h.parents() {
		if err := h.mkdir(p); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	if m, ok := h.mounts["cpuset"]; ok {
		return copyCpuset(m, filepath.Join(m, parentDir))
	}
	return nil
}

// enableControllers turns on warren's v2 controllers for the children of dir,
// writing only those not yet on.
func enableControllers(dir string) error {
	path := filepath.Join(dir, "cgroup.subtree_control")
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("enable controllers: %w", err)
	}
	on := strings.Fields(string(data))
	var add []string
	for _, c := range v2Controllers {
		if !slices.Contains(on, c) && !slices.Contains(on, "+"+c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := writeFile(path, strings.Join(add, " ")); err != nil {
		return fmt.Errorf("enable controllers: %w", err)
	}
	return nil
}

// copyCpuset gives a v1 cpuset group its parent's CPUs and memory nodes when
// it has none yet; until then the kernel refuses to add tasks to it.
func copyCpuset(parent, child string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		cur, err := readString(filepath.Join(child, f))
		if err != nil {
			return fmt.Errorf("set cpuset: %w", err)
		}
		if cur != "" {
			continue
		}
		v, err := readString(filepath.Join(parent, f))
		if err != nil {
			return fmt.Errorf("set cpuset: %w", err)
		}
		if err := writeFile(filepath.Join(child, f), v); err != nil {
			return fmt.Errorf("set cpuset: %w", err)
		}
	}
	return nil
}

func (h *Hierarchy) setLimits(g *Group, l Limits) error {
	if h.version == 1 {
		return h.setLimitsV1(g, l)
	}
	return h.setLimitsV2(g, l)
}

func (h *Hierarchy) setLimitsV1(g *Group, l Limits) error {
	if m, ok := h.mounts["cpuset"]; ok {
		if err := copyCpuset(filepath.Join(m, parentDir), g.dir("cpuset")); err != nil {
			return err
		}
	}
	if l.CPUs > 0 {
		if err := g.write("cpu", "cpu.cfs_period_us", l.cpuPeriod()); err != nil {
			return fmt.Errorf("set cpu limit: %w", err)
		}
		if err := g.write("cpu", "cpu.cfs_quota_us", l.cpuQuota()); err != nil {
			return fmt.Errorf("set cpu limit: %w", err)
		}
	}
	if err := h.limitMemoryV1(g.dir("memory"), l.MemoryBytes); err != nil {
		return err
	}
	if l.Pids > 0 {
		if err := g.write("pids", "pids.max", l.Pids); err != nil {
			return fmt.Errorf("set pids limit: %w", err)
		}
	}
	return nil
}

// limitMemoryV1 caps the memory of the v1 memory group at dir, and its swap
// with it; 0 leaves it unlimited.
func (h *Hierarchy) limitMemoryV1(dir string, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	// memsw may never be below the memory limit: a limit that shrinks goes
	// first, one that grows after memsw.
	limit, memsw := filepath.Join(dir, "memory.limit_in_bytes"), filepath.Join(dir, "memory.memsw.limit_in_bytes")
	v := strconv.FormatInt(bytes, 10)
	if !fileExists(memsw) {
		h.warnSwap()
		if err := writeFile(limit, v); err != nil {
			return fmt.Errorf("set memory limit: %w", err)
		}
	} else if cur, err := readInt(memsw); err == nil && bytes > cur {
		if err := writeFile(memsw, v); err != nil {
			return fmt.Errorf("set swap limit: %w", err)
		}
		if err := writeFile(limit, v); err != nil {
			return fmt.Errorf("set memory limit: %w", err)
		}
	} else {
		if err := writeFile(limit, v); err != nil {
			return fmt.Errorf("set memory limit: %w", err)
		}
		if err := writeFile(memsw, v); err != nil {
			return fmt.Errorf("set swap limit: %w", err)
		}
	}
	// Belt and braces against swapping; some kernels refuse it, and memsw
	// above already stops the escape where swap is accounted.
	if err := writeFile(filepath.Join(dir, "memory.swappiness"), "0"); err != nil {
		h.log.Debug("memory.swappiness not writable", "dir", dir, "err", err)
	}
	return nil
}

func (h *Hierarchy) setLimitsV2(g *Group, l Limits) error {
	if l.CPUs > 0 {
		if err := g.write("cpu", "cpu.max", fmt.Sprintf("%d %d", l.cpuQuota(), l.cpuPeriod())); err != nil {
			return fmt.Errorf("set cpu limit: %w", err)
		}
	}
	if l.MemoryBytes > 0 {
		if err := g.write("memory", "memory.max", l.MemoryBytes); err != nil {
			return fmt.Errorf("set memory limit: %w", err)
		}
		if g.exists("memory", "memory.swap.max") {
			if err := g.write("memory", "memory.swap.max", 0); err != nil {
				return fmt.Errorf("set swap limit: %w", err)
			}
		} else {
			h.warnSwap()
		}
	}
	if l.Pids > 0 {
		if err := g.write("pids", "pids.max", l.Pids); err != nil {
			return fmt.Errorf("set pids limit: %w", err)
		}
	}
	return nil
}

func (h *Hierarchy) warnSwap() {
	h.swapWarn.Do(func() {
		h.log.Warn("kernel has no swap accounting: memory limits do not cover swap")
	})
}

// Open returns the existing group warren/<name>, or ErrNotFound. A group
// present in only some controllers (left half-made by a crash) opens too, so
// that Destroy can remove it; AddProc on it fails.
func (h *Hierarchy) Open(name string) (*Group, error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	g := &Group{h: h, name: name}
	for _, d := range g.dirs() {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return g, nil
		}
	}
	return nil, fmt.Errorf("open cgroup %s: %w", name, ErrNotFound)
}

// List returns the sorted names of the groups under warren/ in any
// controller, for reconciliation after a daemon restart. Directories whose
// names warren could not have made are skipped.
func (h *Hierarchy) List() ([]string, error) {
	var names []string
	for _, p := range h.parents() {
		entries, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list cgroups: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() || validateName(e.Name()) != nil {
				continue
			}
			if !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// validateName is the only gate between a name and a path: it admits no
// '/', '.', NUL or other character, so a name is always one fresh path
// component below warren/ and never a control file's name (those all have a
// '.').
func validateName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%w: %q: length must be 1 to %d", ErrInvalidName, name, maxNameLen)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return fmt.Errorf("%w: %q: only letters, digits, '_' and '-' are allowed", ErrInvalidName, name)
		}
	}
	return nil
}
