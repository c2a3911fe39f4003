//go:build linux

package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"warren/internal/consolelog"
	"warren/internal/fsfreeze"
	"warren/internal/procid"
	"warren/internal/runtime"
)

// Adopt implements runtime.Runtime.
func (r *Runtime) Adopt(ctx context.Context, spec runtime.Spec, raw []byte) (runtime.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil || (st.PID <= 0 && !st.Paused) || st.Token == "" {
		return nil, errors.Join(runtime.ErrGone, r.release(ctx, spec.ID, spec.Dir))
	}
	in := &instance{r: r, id: spec.ID, dir: spec.Dir, done: make(chan struct{}), st: st}
	var err error
	if in.agent, err = listen(spec.Dir, st.Token); err != nil {
		return nil, errors.Join(err, r.release(ctx, spec.ID, spec.Dir))
	}
	if in.console, err = consolelog.Start(filepath.Join(spec.Dir, consoleFIFO), filepath.Join(spec.Dir, consoleLog), 0); err != nil {
		r.log.Warn("adopted sandbox's console not drained", "sandbox", spec.ID, "err", err)
	}
	if st.Paused && !st.Frozen {
		return in, nil
	}
	pidfd, err := procid.Open(st.PID, st.StartTime)
	if err != nil {
		in.agent.release(0)
		return nil, errors.Join(runtime.ErrGone, r.release(ctx, spec.ID, spec.Dir))
	}
	p := procid.Watch(pidfd)
	if st.Frozen {
		// Its agent has let go of the channel; it dials again at the
		// resume. The memory is saved after a whole SpillAfter again.
		in.agent.release(0)
		in.proc = p
		go in.follow(p)
		in.opMu.Lock()
		in.armSpill()
		in.opMu.Unlock()
		return in, nil
	}
	in.run(p, st.PID, st.StartTime)
	// A daemon that died between a freeze and its thaw left a disk frozen.
	for _, d := range []string{rootfsDir, workspaceDir} {
		in.thawHost(filepath.Join(spec.Dir, d))
	}
	return in, nil
}

// Sweep implements runtime.Runtime: it deletes runsc's containers of every
// sandbox that is not kept, with their mounts, and the cgroups of known
// ones. runsc's state directory is this data directory's own, so a
// container there that the store does not know as this node's is a sandbox
// that moved to another node while the daemon was down: its processes end
// here, but its cgroup, named by its ID, is left alone, for another node on
// this host may run it now.
func (r *Runtime) Sweep(ctx context.Context, known, keep map[string]bool) error {
	entries, err := os.ReadDir(r.state)
	if err != nil {
		return err
	}
	var errs []error
	seen := map[string]bool{}
	for _, e := range entries {
		id := containerID(e.Name())
		if id == "" || keep[id] || seen[id] {
			continue
		}
		seen[id] = true
		st, _ := r.stateOf(ctx, id) // no record: no bundle to clean
		if !known[id] {
			r.log.Info("removing a gvisor sandbox that moved away", "sandbox", id)
			errs = append(errs, r.forget(ctx, id, st), clearDir(st.Bundle))
			continue
		}
		r.log.Info("removing leftover gvisor sandbox", "sandbox", id)
		errs = append(errs, r.release(ctx, id, st.Bundle))
	}
	return errors.Join(errs...)
}

// containerID is the container a file of runsc's state directory belongs
// to ("ID_sandbox:ID.state", "ID_sandbox:ID.lock" and the like, and its
// sandbox's control socket "runsc-ID.sock"), or "".
func containerID(name string) string {
	if id, ok := strings.CutPrefix(name, "runsc-"); ok {
		id, ok = strings.CutSuffix(id, ".sock")
		if ok {
			return id
		}
		return ""
	}
	id, _, ok := strings.Cut(name, "_sandbox:")
	if !ok {
		return ""
	}
	return id
}

// thawHost thaws the disk mounted at dir if it is frozen.
func (in *instance) thawHost(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	if err := fsfreeze.Thaw(int(f.Fd())); err != nil && !errors.Is(err, fsfreeze.ErrNotFrozen) {
		in.r.log.Warn("thaw adopted sandbox's disk", "sandbox", in.id, "dir", dir, "err", err)
	}
}
