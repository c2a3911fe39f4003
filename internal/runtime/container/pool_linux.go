//go:build linux

package container

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/cgroup"
	"warren/internal/consolelog"
	"warren/internal/procid"
	"warren/internal/runtime/container/containerinit"
	"warren/internal/runtime/container/spawner"
	"warren/internal/warmpool"
)

// An init is started in two halves. spawn starts the agent binary in fresh
// namespaces under a uid range of its own (on cgroup v1, in a cgroup of its
// own); it pages itself in and waits for its root. Start then gives it the
// sandbox's cgroup (v1: its own, renamed and limited), disk and hostname.
// Warm inits are spawned ahead of time, so a create pays only the second
// half; when none is ready, Start spawns one on the spot.

// initProc is a spawned init waiting for its root.
type initProc struct {
	r        *Runtime
	proc     *procid.Process
	pid      int
	slot     int
	cg       *cgroup.Group // its cgroup (v1, from its spawn on; v2, from Start on); nil when none yet
	cgroupNS bool          // born in cg with a cgroup namespace rooted there (v1)
	sync     *os.File      // our end of the socketpair
	sock     string        // where its listening socket is bound
	fifo     string        // its console FIFO, which console drains into log
	log      string        // its console log
	console  *consolelog.Drain
	warm     bool // spawned ahead of time
}

func (p *initProc) hostUID() int { return uidBase + p.slot*uidsPerSandbox }

// kill ends a spawned init that will not become a sandbox and frees its slot.
func (p *initProc) kill() {
	p.proc.Kill()
	<-p.proc.Done()
	if p.cg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.cg.Destroy(ctx); err != nil {
			p.r.log.Warn("remove a killed init's cgroup", "err", err)
		}
		cancel()
	}
	p.sync.Close()
	p.console.Stop()
	p.r.freeSlot(p.slot)
}

// remove removes the files of a killed init.
func (p *initProc) remove() {
	os.Remove(p.sock)
	os.Remove(p.fifo)
	os.Remove(p.log)
}

// The names of a sandbox's console FIFO and log in its private directory.
const (
	consoleFIFO = "console.fifo"
	consoleLog  = "console.log"
)

// spawn starts an init, through the spawner (package spawner says why),
// whose socket is dir/sockName and whose console FIFO and log are
// dir/consoleName.fifo and dir/consoleName.log. Its stdout and stderr are
// the FIFO, drained into the log (package consolelog), never the log
// itself. An idle init starts in scheduling class SCHED_IDLE.
func (r *Runtime) spawn(dir, sockName, consoleName string, idle bool) (_ *initProc, err error) {
	slot, claim, err := r.allocSlot()
	if err != nil {
		return nil, err
	}
	started := false // from then on, kill frees the slot
	defer func() {
		if err != nil && !started {
			r.freeSlot(slot)
		}
	}()
	sock := filepath.Join(dir, sockName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen for agent: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("agent listener: %w", err)
	}
	defer lnFile.Close()

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	parentSync := os.NewFile(uintptr(fds[0]), "sync-parent")
	childSync := os.NewFile(uintptr(fds[1]), "sync-child")
	defer childSync.Close()

	fifo, logPath := filepath.Join(dir, consoleName+".fifo"), filepath.Join(dir, consoleName+".log")
	console, err := consolelog.Start(fifo, logPath, 0)
	if err != nil {
		parentSync.Close()
		return nil, err
	}
	out, err := consolelog.Writer(fifo)
	if err != nil {
		parentSync.Close()
		console.Stop()
		return nil, err
	}
	defer out.Close()

	req := spawner.Request{
		// The init runs as an unprivileged host uid that may not traverse
		// the directories the agent binary lives in: it is executed from
		// the runtime's sealed memfd instead.
		Path: fmt.Sprintf("/proc/self/fd/%d", containerinit.FdSelf),
		Args: []string{containerinit.Arg0, "--listen-fd", fmt.Sprint(containerinit.FdListener), "--mode", "container"},
		Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
			unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWNET,
		HostID: uidBase + slot*uidsPerSandbox, Size: uidsPerSandbox,
		Idle: idle,
	}
	p := &initProc{r: r, slot: slot, sync: parentSync, sock: sock, fifo: fifo, log: logPath, console: console}
	fail := func(err error) (*initProc, error) {
		parentSync.Close()
		console.Stop()
		p.remove()
		if p.cg != nil {
			p.cg.Destroy(context.Background())
		}
		return nil, err
	}
	// On cgroup v1 the init is born in a cgroup of its own, with a cgroup
	// namespace rooted there, which Start renames after the sandbox.
	var join []*os.File
	if r.cgroups.Version() == 1 {
		if p.cg, err = r.initCgroup(slot); err != nil {
			return fail(err)
		}
		if join, err = p.cg.Tasks(); err != nil {
			return fail(err)
		}
		defer func() {
			for _, f := range join {
				f.Close()
			}
		}()
		req.Cloneflags |= unix.CLONE_NEWCGROUP
		p.cgroupNS = true
	}
	pid, pidfd, err := r.spawner.Spawn(req, out, []*os.File{lnFile, childSync, r.agent, claim}, join) // containerinit.Fd*: 3, 4, 5, 6
	if err != nil {
		return fail(fmt.Errorf("start init: %w", err))
	}
	p.pid, p.proc, started = pid, procid.Watch(pidfd), true
	return p, nil
}

// initCgroupPrefix names the cgroup an init is spawned into on cgroup v1:
// init-TAG-SLOT, where TAG is its runtime's (initTag) and SLOT its uid
// slot, unique on the host. Start renames it after the sandbox.
const initCgroupPrefix = "init-"

// initTag is the TAG of a runtime's init cgroups: a hash of its warm
// directory, which a later daemon on the same data directory shares, so
// that its Sweep removes what an earlier one left; without a warm
// directory (no inits outlive the process but a sandbox's), its pid.
func initTag(warmDir string) string {
	if warmDir == "" {
		return fmt.Sprintf("p%d", os.Getpid())
	}
	sum := sha256.Sum256([]byte(warmDir))
	return hex.EncodeToString(sum[:4])
}

// initCgroupName is the name of the cgroup of the init of slot.
func (r *Runtime) initCgroupName(slot int) string {
	return initCgroupPrefix + r.initTag + "-" + strconv.Itoa(slot)
}

// parseInitCgroup parses an init cgroup's name.
func parseInitCgroup(name string) (tag string, slot int, ok bool) {
	rest, found := strings.CutPrefix(name, initCgroupPrefix)
	i := strings.LastIndexByte(rest, '-')
	if !found || i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	return rest[:i], n, err == nil && n >= 0 && n < maxSlots && rest[i+1:] == strconv.Itoa(n)
}

// initCgroup makes the cgroup the init of uid slot slot is born in on
// cgroup v1, without limits (Start sets the sandbox's). A group of that
// name left by an earlier daemon is removed first.
func (r *Runtime) initCgroup(slot int) (*cgroup.Group, error) {
	name := r.initCgroupName(slot)
	cg, err := r.cgroups.Create(name, cgroup.Limits{})
	if errors.Is(err, cgroup.ErrExists) {
		if err = r.destroy(context.Background(), name, ""); err == nil {
			cg, err = r.cgroups.Create(name, cgroup.Limits{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("init cgroup: %w", err)
	}
	return cg, nil
}

// sweepInitCgroup removes the cgroup of an init that is not this
// runtime's: one an earlier daemon on the same data directory left (its
// warm inits may still be on their way out: it kills them), or one whose
// slot nobody on the host claims. Another warren server's live inits
// claim theirs.
func (r *Runtime) sweepInitCgroup(ctx context.Context, name, tag string, slot int) error {
	r.slotsMu.Lock()
	defer r.slotsMu.Unlock()
	if _, ours := r.slots[slot]; ours && tag == r.initTag {
		return nil
	}
	if tag != r.initTag {
		_, claim, err := r.claims.Take(slot+1, func(n int) bool { return n != slot })
		if err != nil {
			return nil // held: a live init's
		}
		defer claim.Close()
	}
	r.log.Info("removing a leftover init's cgroup", "cgroup", name)
	return r.destroy(ctx, name, "")
}

// take returns a warm init moved into dir (its socket becomes
// dir/agent.sock, its console dir/console.fifo and dir/console.log), or
// spawns one there.
func (r *Runtime) take(dir string) (*initProc, error) {
	for {
		p, ok := r.pool.Take()
		if !ok {
			return r.spawn(dir, "agent.sock", "console", false)
		}
		select {
		case <-p.proc.Done(): // died while waiting: take another
			p.kill()
			p.remove()
			continue
		default:
		}
		if err := setProcessClass(p.pid, false); err != nil {
			p.kill()
			return nil, fmt.Errorf("warm init priority: %w", err)
		}
		sock, fifo, logPath := filepath.Join(dir, "agent.sock"), filepath.Join(dir, consoleFIFO), filepath.Join(dir, consoleLog)
		// A bound socket stays bound to its file when renamed: the agent
		// keeps listening and the node dials the new path. The console's
		// drain holds its FIFO and log open, so it goes on too.
		err := errors.Join(os.Rename(p.sock, sock), os.Rename(p.fifo, fifo), os.Rename(p.log, logPath))
		p.sock, p.fifo, p.log = sock, fifo, logPath
		if err != nil {
			p.kill()
			return nil, fmt.Errorf("move warm init: %w", err)
		}
		return p, nil
	}
}

// refillQuiet is how long no Start may have begun before the pool is
// refilled. Starting an init (namespaces, exec, Go start-up, paging in) slows
// a create running at the same time, even at idle priority: measured here,
// under PVM, a create took about twice as long with a refill beside it. So
// refills wait for a pause in creates; a burst longer than the pool gets
// inits started on the spot.
const refillQuiet = 100 * time.Millisecond

// newPool makes the pool of opts.Warm inits, which the first Sweep starts.
//
// Its goroutine runs on an OS thread of scheduling class SCHED_IDLE, and
// the inits it spawns start in that class too, so starting and paging in a
// warm init uses only CPU nobody else wants; take moves an init back to
// the normal class when it becomes a sandbox.
func (r *Runtime) newPool() *warmpool.Pool[*initProc] {
	seq := 0 // only the pool's goroutine spawns
	return warmpool.New(warmpool.Config[*initProc]{
		Size:  r.opts.Warm,
		Quiet: refillQuiet,
		Log:   r.log,
		Setup: func() {
			goruntime.LockOSThread() // never unlocked: the thread dies with the goroutine
			if err := spawner.SetIdleClass(0, true); err != nil {
				r.log.Warn("warm inits start at normal priority", "err", err)
			}
		},
		Make: func() (*initProc, error) {
			seq++
			name := fmt.Sprintf("warm-%d", seq)
			p, err := r.spawn(r.opts.WarmDir, name+".sock", name, true)
			if err != nil {
				return nil, fmt.Errorf("spawn warm init: %w", err)
			}
			p.warm = true
			return p, nil
		},
		Discard: func(p *initProc) error { p.kill(); return nil },
	})
}

// allocSlot reserves the lowest uid range free on the host, and returns its
// claim for the init to hold.
func (r *Runtime) allocSlot() (int, *os.File, error) {
	r.slotsMu.Lock()
	defer r.slotsMu.Unlock()
	n, claim, err := r.claims.Take(maxSlots, func(n int) bool { _, held := r.slots[n]; return held })
	if err != nil {
		return 0, nil, fmt.Errorf("sandbox uid range: %w", err)
	}
	r.slots[n] = claim
	return n, claim, nil
}

// useSlot marks an adopted sandbox's uid range as taken, taking its claim
// back from its init (pidfd). An init of a daemon from before the claims
// holds none: the slot is then claimed here if no one else has it.
func (r *Runtime) useSlot(n, pidfd int) {
	claim, err := r.claims.Adopt(n, pidfd, containerinit.FdClaim)
	if err != nil {
		var taken error
		if _, claim, taken = r.claims.Take(n+1, func(m int) bool { return m != n }); taken != nil {
			r.log.Error("adopted sandbox's uid range is not claimed host-wide", "slot", n, "err", errors.Join(err, taken))
		}
	}
	r.slotsMu.Lock()
	r.slots[n] = claim
	r.slotsMu.Unlock()
}

// freeSlot frees a uid range whose init is gone.
func (r *Runtime) freeSlot(n int) {
	r.slotsMu.Lock()
	claim := r.slots[n]
	delete(r.slots, n)
	r.slotsMu.Unlock()
	if claim != nil {
		claim.Close()
	}
}

// setProcessClass sets the scheduling class of every thread of pid. The
// class belongs to each thread and new threads inherit their creator's, so
// it goes over the threads until a pass finds none it had not set.
func setProcessClass(pid int, idle bool) error {
	done := map[int]bool{}
	for pass := 0; pass < 5; pass++ {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		fresh := false
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := spawner.SetIdleClass(tid, idle); err != nil && !errors.Is(err, unix.ESRCH) {
				return err
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return nil
		}
	}
	return nil
}
