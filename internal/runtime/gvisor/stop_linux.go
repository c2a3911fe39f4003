//go:build linux

package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/cgroup"
	"warren/internal/fsfreeze"
	"warren/internal/mountinfo"
	"warren/internal/netnsfile"
)

// Stop implements runtime.Instance.
func (in *instance) Stop(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	if in.stopped {
		return in.stopErr
	}
	in.stopped = true
	if in.spill != nil {
		in.spill.Stop()
	}
	ctx = context.WithoutCancel(ctx)
	in.agent.release(0)
	in.stopErr = in.r.release(ctx, in.id, in.dir)
	in.mu.Lock()
	p := in.proc
	in.mu.Unlock()
	if p != nil {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			in.stopErr = errors.Join(in.stopErr, fmt.Errorf("sandbox %s: its process did not exit after kill", in.id))
		}
	}
	if in.console != nil {
		in.console.Stop()
	}
	in.closeDone()
	return in.stopErr
}

// release kills the sandbox of container id and removes what it held: its
// runsc container, cgroup, mounts, network namespace and (when dir is not
// "") its directory's contents. It is idempotent.
func (r *Runtime) release(ctx context.Context, id, dir string) error {
	errs := []error{r.deleteContainer(ctx, id), r.removeRecords(id)}
	cg, err := r.cgroups.Open(id)
	switch {
	case err == nil:
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs = append(errs, cg.Destroy(kctx), removeRunscCgroups(cg.Path()))
		cancel()
	case !errors.Is(err, cgroup.ErrNotFound):
		errs = append(errs, err)
	}
	return errors.Join(append(errs, clearDir(dir))...)
}

// removeRunscCgroups removes the directories at path that runsc made in
// the host's cgroup v1 hierarchies warren's own groups do not use (blkio,
// devices, name=systemd and the like; Destroy removed the rest). runsc's
// delete removes them only if the container made them, and a container
// that a restore started found them there.
func removeRunscCgroups(path string) error {
	mounts, err := mountinfo.Read()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if m.FSType != "cgroup" {
			continue
		}
		if err := os.Remove(filepath.Join(m.Point, path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deleteContainer kills the sandbox of container id and has runsc forget
// it; a container runsc does not know is not an error.
func (r *Runtime) deleteContainer(ctx context.Context, id string) error {
	if r.runsc == "" {
		return nil
	}
	out, err := exec.CommandContext(ctx, r.runsc, "--root", r.state, "delete", "--force", id).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("does not exist")) && !bytes.Contains(out, []byte("not found")) {
		return fmt.Errorf("runsc delete: %w: %s", err, tail(string(out)))
	}
	return nil
}

// forget ends the sandbox of container id, whose runsc record is st,
// without runsc's delete, which would remove its cgroups (another node on
// this host may hold them now): the sandbox's init is killed, which ends
// the sandbox, and its record removed from the state directory.
func (r *Runtime) forget(ctx context.Context, id string, st runscState) error {
	if st.Status == "paused" {
		// A frozen sandbox takes no signal until it runs again.
		if out, err := exec.CommandContext(ctx, r.runsc, "--root", r.state, "resume", id).CombinedOutput(); err != nil {
			r.log.Warn("resume a frozen sandbox that moved away", "sandbox", id, "err", err, "out", tail(string(out)))
		}
		st.Status = "running"
	}
	if st.Status == "running" {
		if out, err := exec.CommandContext(ctx, r.runsc, "--root", r.state, "kill", id, "KILL").CombinedOutput(); err != nil {
			r.log.Warn("kill a sandbox that moved away", "sandbox", id, "err", err, "out", tail(string(out)))
		} else {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			exec.CommandContext(wctx, r.runsc, "--root", r.state, "wait", id).Run()
			cancel()
		}
	}
	return r.removeRecords(id)
}

// removeRecords removes runsc's files of container id from the state
// directory: its state, its lock and its sandbox's control socket, which
// runsc leaves when its sandbox was killed or never started.
func (r *Runtime) removeRecords(id string) error {
	entries, err := os.ReadDir(r.state)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if containerID(e.Name()) == id {
			errs = append(errs, os.RemoveAll(filepath.Join(r.state, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// clearDir unmounts a sandbox directory's disks, removes its network
// namespace and then its contents; "" is no directory.
func clearDir(dir string) error {
	if dir == "" {
		return nil
	}
	var errs []error
	for _, d := range []string{rootfsDir, workspaceDir} {
		errs = append(errs, unmount(filepath.Join(dir, d)))
	}
	errs = append(errs, netnsfile.Remove(filepath.Join(dir, netnsFile)))
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// unmount unmounts what is mounted at dir (a disk, thawed first should a
// dead daemon have left it frozen), until dir is no mount point; a
// missing dir is not an error.
func unmount(dir string) error {
	for range 4 {
		mounted, err := isMountPoint(dir)
		if err != nil || !mounted {
			return err
		}
		if f, err := os.Open(dir); err == nil {
			fsfreeze.Thaw(int(f.Fd()))
			f.Close()
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", dir)
}

// isMountPoint says whether dir is on another filesystem than its parent.
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}
