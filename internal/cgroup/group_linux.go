//go:build linux

package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
)

// killRound bounds one round of Kill: if the group is not empty by then
// (a process was stuck in the kernel, or raced in), Kill starts another.
const killRound = time.Second

// freezeWait bounds how long a Kill round waits for the group to freeze.
const freezeWait = 100 * time.Millisecond

// Group is one sandbox's cgroup, warren/<name> in every controller.
type Group struct {
	h    *Hierarchy
	name string
}

// Name is the group's name, without the warren/ prefix.
func (g *Group) Name() string { return g.name }

// Path is the group's path under each controller's root, as an OCI
// runtime's linux.cgroupsPath names it (the gVisor runtime's runsc joins
// the group there).
func (g *Group) Path() string { return "/" + parentDir + "/" + g.name }

// dirs are the group's directories, one per distinct mount, in creation
// order.
func (g *Group) dirs() []string {
	var dirs []string
	for _, p := range g.h.parents() {
		dirs = append(dirs, filepath.Join(p, g.name))
	}
	return dirs
}

// dirsWithWork are dirs, each followed by its work subgroup's (see Work)
// in the controllers that may have one.
func (g *Group) dirsWithWork() []string {
	var dirs []string
	for _, d := range g.dirs() {
		dirs = append(dirs, d)
		if g.h.version == 1 {
			for _, c := range workControllers {
				if d == g.dir(c) {
					dirs = append(dirs, filepath.Join(d, workDir))
					break
				}
			}
		}
	}
	return dirs
}

// dir is the group's directory for controller c; on v2 there is only one.
func (g *Group) dir(c string) string {
	if g.h.version == 2 {
		return filepath.Join(g.h.root, parentDir, g.name)
	}
	return filepath.Join(g.h.mounts[c], parentDir, g.name)
}

func (g *Group) write(c, file string, v any) error {
	return writeFile(filepath.Join(g.dir(c), file), fmt.Sprint(v))
}

func (g *Group) exists(c, file string) bool { return fileExists(filepath.Join(g.dir(c), file)) }

// AddProc moves process pid, with all its threads, into the group in every
// controller. Call it before the process runs untrusted code. If it fails
// the process may be in some controllers only: kill it.
func (g *Group) AddProc(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("add pid %d to cgroup %s: invalid pid", pid, g.name)
	}
	for _, d := range g.dirs() {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("add pid %d to cgroup %s: %w", pid, g.name, err)
		}
	}
	return nil
}

// Limit sets the group's limits to l; a zero field leaves that limit as
// it is. It is for a group made ahead of its processes' work (the
// container runtime's warm inits): limits are in before the process
// runs anything untrusted.
func (g *Group) Limit(l Limits) error {
	if err := l.validate(); err != nil {
		return fmt.Errorf("limit cgroup %s: %w", g.name, err)
	}
	if err := g.h.setLimits(g, l); err != nil {
		return fmt.Errorf("limit cgroup %s: %w", g.name, err)
	}
	return nil
}

// Rename renames the group, in every controller, with its processes in
// it, and returns it under its new name: a group made and joined ahead of
// time (moving a process into a group on v1 waits for an RCU grace period,
// 7-14 ms here) takes its sandbox's name when it gets one. On failure the
// group keeps its old name. Only cgroup v1 renames groups.
func (g *Group) Rename(name string) (*Group, error) {
	if g.h.version != 1 {
		return nil, fmt.Errorf("rename cgroup %s: cgroup v2 cannot rename a group", g.name)
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	to := &Group{h: g.h, name: name}
	from, dest := g.dirs(), to.dirs()
	for i := range from {
		if err := os.Rename(from[i], dest[i]); err != nil {
			for j := range i {
				os.Rename(dest[j], from[j])
			}
			if errors.Is(err, fs.ErrExist) {
				err = ErrExists
			}
			return nil, fmt.Errorf("rename cgroup %s to %s: %w", g.name, name, err)
		}
	}
	return to, nil
}

// workDir is the name of a group's work subgroup (see Work).
const workDir = "work"

// workControllers are the v1 controllers a work subgroup is made in: the
// ones whose limits it keeps apart from the group's. The others (cpu,
// freezer…) see the whole group as one.
var workControllers = []string{"memory", "pids"}

// Work makes the group's work subgroup, warren/<name>/work, with limits l
// (memory and pids; CPUs are the group's), and returns its tasks files,
// open for writing. The container runtime's agent moves one thread of its
// own into it through them and starts every sandbox process from that
// thread, so that the sandbox's processes are held to l while the agent,
// left in the group, keeps what the group has beyond l for itself: a fork
// bomb or a memory hog in the sandbox cannot take the agent's last pid or
// page, and the OOM killer picks among the sandbox's processes first.
//
// The files are opened here, by the daemon, so the kernel checks a write
// against the daemon's credentials (cgroup v1 checks those the file was
// opened with): the agent needs no cgroupfs. It should close them as soon
// as its thread has moved.
//
// Work is for cgroup v1, where a thread may sit in another group than its
// process. On v2 it returns no files and makes nothing: the sandbox's
// processes share the group with the agent there.
func (g *Group) Work(l Limits) ([]*os.File, error) {
	if g.h.version != 1 {
		return nil, nil
	}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("work cgroup of %s: %w", g.name, err)
	}
	var files []*os.File
	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("work cgroup of %s: %w", g.name, err)
	}
	for _, c := range workControllers {
		dir := filepath.Join(g.dir(c), workDir)
		if err := g.h.mkdir(dir); err != nil {
			return fail(err)
		}
		var err error
		switch c {
		case "memory":
			err = g.h.limitMemoryV1(dir, l.MemoryBytes)
		case "pids":
			if l.Pids > 0 {
				err = writeFile(filepath.Join(dir, "pids.max"), strconv.FormatInt(l.Pids, 10))
			}
		}
		if err != nil {
			return fail(err)
		}
		f, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			return fail(err)
		}
		files = append(files, f)
	}
	return files, nil
}

// Tasks returns the group's tasks files, one per mount, open for
// writing: a thread that writes "0" to each moves itself into the group,
// which on cgroup v1 takes no host-wide lock (AddProc, which moves another
// process, waits for an RCU grace period there). The container runtime's
// spawner starts an init from such a thread, so that the init is born in
// the group. Opened here, by the daemon, a write is checked against the
// daemon's credentials (as Work's are). On v2 it returns no files.
func (g *Group) Tasks() ([]*os.File, error) {
	if g.h.version != 1 {
		return nil, nil
	}
	var files []*os.File
	for _, d := range g.dirs() {
		f, err := os.OpenFile(filepath.Join(d, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("tasks of cgroup %s: %w", g.name, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// Procs returns the sorted PIDs of the processes in the group, in the
// caller's PID namespace: on v1, those in any of its controllers. A missing
// group has none.
func (g *Group) Procs() ([]int, error) {
	var pids []int
	for _, d := range g.dirsWithWork() {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list procs of cgroup %s: %w", g.name, err)
		}
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			if err == nil && pid <= 0 {
				err = fmt.Errorf("bad pid %d", pid)
			}
			if err != nil {
				return nil, fmt.Errorf("list procs of cgroup %s: %w", g.name, err)
			}
			if !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// Kill kills every process in the group, those forking while it runs
// included, and returns once the group is empty, or with an error when ctx
// ends first. On v2 with cgroup.kill the kernel does it atomically;
// otherwise each round freezes the group, sends SIGKILL to every process
// through a pidfd, and thaws the group so that the signals land. Kill may
// be called concurrently and repeatedly; a missing group is empty. It needs
// Linux 5.3 (pidfd_open) unless cgroup.kill is there.
func (g *Group) Kill(ctx context.Context) error {
	for {
		pids, err := g.Procs()
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.name, err)
		}
		if len(pids) == 0 {
			return nil
		}
		if err := g.killOnce(ctx); err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.name, err)
		}
		rctx, cancel := context.WithTimeout(ctx, killRound)
		err = backoff.Poll(rctx, pollWaits, g.empty)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			left, _ := g.Procs()
			return fmt.Errorf("kill cgroup %s: %d processes left: %w", g.name, len(left), ctx.Err())
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("kill cgroup %s: %w", g.name, err)
		}
		g.h.log.Warn("cgroup not empty after a kill round", "name", g.name)
	}
}

func (g *Group) empty() (bool, error) {
	pids, err := g.Procs()
	return len(pids) == 0, err
}

// killOnce sends every process in the group SIGKILL. Unless the kernel can
// do it for us (cgroup.kill), the group is frozen first so that no process
// can fork while the round runs, and thawed after so the signals land.
func (g *Group) killOnce(ctx context.Context) error {
	if g.h.version == 2 {
		kill := filepath.Join(g.dir(""), "cgroup.kill")
		if _, err := os.Stat(kill); err == nil {
			return writeFile(kill, "1")
		}
	}
	err := g.freeze(ctx)
	if err == nil {
		err = g.signalAll()
	}
	// Thaw even after an error or a cancelled ctx: a group left frozen
	// holds its processes, and their memory, forever.
	if terr := g.thaw(); terr != nil {
		return errors.Join(err, terr)
	}
	return err
}

// freeze asks the kernel to freeze the group and waits, at most freezeWait,
// until it reports the group frozen. It does not fail when the group stays
// freezing: a task in a wait the freezer cannot stop (a vfork parent whose
// child froze first, seen on Linux 6.18 v1) holds it there, and such a task
// dies of SIGKILL anyway.
func (g *Group) freeze(ctx context.Context) error {
	var (
		state, want string
		frozen      func() (bool, error)
	)
	if g.h.version == 1 {
		state, want = filepath.Join(g.dir("freezer"), "freezer.state"), "FROZEN"
		frozen = func() (bool, error) {
			s, err := readString(state)
			return s == "FROZEN", err
		}
	} else {
		state, want = filepath.Join(g.dir(""), "cgroup.freeze"), "1"
		frozen = func() (bool, error) {
			n, err := readKeyed(filepath.Join(g.dir(""), "cgroup.events"), "frozen")
			return n == 1, err
		}
	}
	if err := writeFile(state, want); err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, freezeWait)
	defer cancel()
	err := backoff.Poll(wctx, pollWaits, frozen)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		g.h.log.Debug("cgroup still freezing, killing anyway", "name", g.name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	return nil
}

// signalAll sends SIGKILL to every process in the group without ever
// signalling a process outside it, even if a PID is reused (pid_max can be
// as low as 32768): it opens a pidfd for every listed PID, then lists the
// group again and signals only the pidfds whose PID is still listed. A PID
// listed after its pidfd was opened belongs, at that moment, to a member of
// the group; if the pidfd's process is not that member, it has exited and
// the signal goes nowhere. Sandboxed processes cannot leave their group
// (the invariant in the package comment), so no member leaves in between.
func (g *Group) signalAll() error {
	pids, err := g.Procs()
	if err != nil {
		return err
	}
	fds := make(map[int]int, len(pids))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open pidfd of %d: %w", pid, err)
		}
		fds[pid] = fd
	}
	still, err := g.Procs()
	if err != nil {
		return err
	}
	for pid, fd := range fds {
		if !slices.Contains(still, pid) {
			continue
		}
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("signal %d: %w", pid, err)
		}
	}
	return nil
}

func (g *Group) thaw() error {
	var err error
	if g.h.version == 1 {
		err = writeFile(filepath.Join(g.dir("freezer"), "freezer.state"), "THAWED")
	} else {
		err = writeFile(filepath.Join(g.dir(""), "cgroup.freeze"), "0")
	}
	if err != nil {
		return fmt.Errorf("thaw: %w", err)
	}
	return nil
}

// Destroy kills every process in the group and removes its directory from
// every controller. It may be called again, and on a group that is already
// gone. Callers that must not skip teardown pass a context that a cancelled
// request cannot end (context.WithoutCancel plus a timeout).
func (g *Group) Destroy(ctx context.Context) error {
	if err := g.Kill(ctx); err != nil {
		return fmt.Errorf("destroy cgroup %s: %w", g.name, err)
	}
	// The work subgroup goes before the group. The kernel may still be
	// tearing down tasks that left cgroup.procs, so rmdir retries on EBUSY.
	for _, d := range slices.Backward(g.dirsWithWork()) {
		err := backoff.Poll(ctx, pollWaits, func() (bool, error) {
			err := g.h.rmdir(d)
			switch {
			case err == nil, errors.Is(err, fs.ErrNotExist):
				return true, nil
			case errors.Is(err, unix.EBUSY):
				return false, nil
			}
			return false, err
		})
		if err != nil {
			return fmt.Errorf("destroy cgroup %s: %w", g.name, err)
		}
	}
	g.h.log.Debug("cgroup destroyed", "name", g.name)
	return nil
}

// Stats reads the group's resource use.
func (g *Group) Stats() (Stats, error) {
	var (
		s   Stats
		err error
	)
	if g.h.version == 1 {
		s, err = g.statsV1()
	} else {
		s, err = g.statsV2()
	}
	if err != nil {
		return Stats{}, fmt.Errorf("stats of cgroup %s: %w", g.name, err)
	}
	return s, nil
}

func (g *Group) statsV1() (Stats, error) {
	var s Stats
	var err error
	if s.MemoryBytes, err = readInt(filepath.Join(g.dir("memory"), "memory.usage_in_bytes")); err != nil {
		return s, err
	}
	if s.MemoryLimit, err = readInt(filepath.Join(g.dir("memory"), "memory.limit_in_bytes")); err != nil {
		return s, err
	}
	if s.MemoryLimit >= v1NoLimit() {
		s.MemoryLimit = 0
	}
	if s.Pids, err = readInt(filepath.Join(g.dir("pids"), "pids.current")); err != nil {
		return s, err
	}
	if s.CPUUsageNanos, err = readInt(filepath.Join(g.dir("cpuacct"), "cpuacct.usage")); err != nil {
		return s, err
	}
	s.OOMKills, err = readKeyed(filepath.Join(g.dir("memory"), "memory.oom_control"), "oom_kill")
	return s, err
}

// v1NoLimit is how v1 reports "no memory limit": the largest page-aligned
// int64.
func v1NoLimit() int64 {
	page := int64(os.Getpagesize())
	return math.MaxInt64 / page * page
}

func (g *Group) statsV2() (Stats, error) {
	var s Stats
	var err error
	d := g.dir("")
	if s.MemoryBytes, err = readInt(filepath.Join(d, "memory.current")); err != nil {
		return s, err
	}
	limit, err := readString(filepath.Join(d, "memory.max"))
	if err != nil {
		return s, err
	}
	if limit != "max" {
		if s.MemoryLimit, err = parseCount(limit); err != nil {
			return s, fmt.Errorf("parse memory.max: %w", err)
		}
	}
	if s.Pids, err = readInt(filepath.Join(d, "pids.current")); err != nil {
		return s, err
	}
	usec, err := readKeyed(filepath.Join(d, "cpu.stat"), "usage_usec")
	if err != nil {
		return s, err
	}
	if usec > math.MaxInt64/1000 {
		return s, fmt.Errorf("cpu.stat usage_usec %d out of range", usec)
	}
	s.CPUUsageNanos = usec * 1000
	s.OOMKills, err = readKeyed(filepath.Join(d, "memory.events"), "oom_kill")
	return s, err
}
