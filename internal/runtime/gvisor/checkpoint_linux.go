//go:build linux

package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/guest"
	"warren/internal/runtime"
)

// Memory checkpoints. `runsc pause` stops every task of the sandbox where
// it is, its memory held by the Sentry, and `runsc resume` runs them on:
// tens of milliseconds each way. `runsc checkpoint` saves a paused Sentry,
// the whole sandbox kernel with every process's memory, to an image
// directory (--leave-running keeps it paused); `runsc restore` starts a
// Sentry from the image, with the bundle's disks and network, its
// processes running on from where they were. The disks are the host's
// mounts, not in the image: a sandbox restored from an image must have the
// disk the image was saved with, or a clone of it taken while nothing ran.
//
// A pause saves the image at once, into the sandbox's directory, and then
// has two stages: frozen (paused, the Sentry alive with its memory) and,
// after Options.SpillAfter, ended (no process). A resume from the first is
// a `runsc resume`, from the second a restore. The image serves a wake on
// another node from the first moment (runtime.Pauser.Image).
//
// The agent's channel holds a host socket, which the Sentry cannot save:
// before a freeze the runtime ends the channel and waits until the agent
// has closed its end (channel.release), and the agent dials again (to
// nobody) until the runtime listens again.

var (
	_ runtime.Pauser = (*instance)(nil)
	_ runtime.Forker = (*instance)(nil)
	_ runtime.Imager = (*Runtime)(nil)
)

// memoryDir is where a paused sandbox's image is kept, in its directory.
const memoryDir = "memory"

// imageTokenFile keeps, in an image's directory, the token of the agent
// saved in it (channel), which sandboxes started from the image expect.
const imageTokenFile = "agent-token"

// Waits: how long the agent has to let go of its channel before a freeze
// (it does within milliseconds), and how long a saved Sentry has to exit.
const (
	agentLetGo = time.Second
	exitWait   = 10 * time.Second
)

// saveTries bounds the saves of a frozen sandbox whose agent still held
// its channel (it was frozen before it saw the end): between tries the
// sandbox runs for a moment to let go.
const saveTries = 5

// Pause implements runtime.Pauser: the sandbox is frozen and its memory
// saved into its directory, durably (the image outlives the daemon), and
// its process ended at once or after Options.SpillAfter. If the freeze or
// the save fails the sandbox runs on.
func (in *instance) Pause(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	switch {
	case in.stopped:
		return errors.New("the sandbox is stopped")
	case in.st.Paused:
		return nil
	}
	if err := in.freeze(ctx); err != nil {
		return err
	}
	image := filepath.Join(in.dir, memoryDir)
	err := in.saveFrozen(ctx, image)
	if err == nil {
		err = syncDir(image)
	}
	if err != nil {
		os.RemoveAll(image)
		if terr := in.thaw(ctx); terr != nil {
			return errors.Join(err, terr)
		}
		return err
	}
	if in.r.opts.SpillAfter > 0 {
		in.mu.Lock()
		in.st.Paused, in.st.Frozen = true, true
		in.mu.Unlock()
		in.armSpill()
		in.r.log.Info("gvisor paused", "sandbox", in.id, "process", "held")
		return nil
	}
	return in.end(image, "gvisor paused")
}

// Image implements runtime.Pauser.
func (in *instance) Image() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.st.Paused {
		return ""
	}
	return filepath.Join(in.dir, memoryDir)
}

// Resume implements runtime.Pauser: a frozen sandbox runs on; a saved one
// is restored from its image, and the image removed once the agent
// answers.
func (in *instance) Resume(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	switch {
	case in.stopped:
		return errors.New("the sandbox is stopped")
	case !in.st.Paused:
		return nil
	case in.st.Frozen:
		if in.spill != nil {
			in.spill.Stop() // one waiting for opMu finds the sandbox running
		}
		if err := in.thaw(ctx); err != nil {
			in.armSpill()
			return err
		}
		in.mu.Lock()
		in.st.Paused, in.st.Frozen = false, false
		in.mu.Unlock()
		in.dropImage() // it ran on from where the image was
		return nil
	}
	image := filepath.Join(in.dir, memoryDir)
	if err := in.restore(ctx, image); err != nil {
		return err
	}
	in.dropImage()
	return nil
}

// dropImage removes the image of a sandbox that runs again, in the
// background: its name is free at once for the next pause.
func (in *instance) dropImage() {
	image := filepath.Join(in.dir, memoryDir)
	old := fmt.Sprintf("%s.old-%d", image, time.Now().UnixNano())
	if err := os.Rename(image, old); err != nil {
		os.RemoveAll(image)
		return
	}
	go os.RemoveAll(old)
}

// armSpill ends the frozen sandbox's process after Options.SpillAfter.
// in.opMu is held.
func (in *instance) armSpill() {
	in.spill = time.AfterFunc(in.r.opts.SpillAfter, in.spillNow)
}

// spillNow ends a frozen sandbox's process, its memory saved already; a
// sandbox whose process would not end stays frozen and is tried again
// after Options.SpillAfter.
func (in *instance) spillNow() {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	if in.stopped || !in.st.Frozen {
		return
	}
	if err := in.end(filepath.Join(in.dir, memoryDir), "gvisor paused sandbox's process ended"); err != nil {
		in.r.log.Warn("end a paused sandbox's process; it stays frozen", "sandbox", in.id, "err", err)
		in.armSpill()
	}
}

// Hold implements runtime.Forker: the sandbox is frozen and saved to
// path, and stays frozen until resume. A clone of its disk taken
// meanwhile is the disk the image expects.
func (in *instance) Hold(ctx context.Context, path string) (func() error, error) {
	in.opMu.Lock()
	switch {
	case in.stopped:
		in.opMu.Unlock()
		return nil, errors.New("the sandbox is stopped")
	case in.st.Paused:
		in.opMu.Unlock()
		return nil, errors.New("the sandbox is paused")
	}
	if err := in.freeze(ctx); err != nil {
		in.opMu.Unlock()
		return nil, err
	}
	resume := func() error {
		defer in.opMu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := in.thaw(rctx); err != nil {
			return fmt.Errorf("run the sandbox again after its fork: %w", err)
		}
		return nil
	}
	t0 := time.Now()
	if err := in.saveFrozen(ctx, path); err != nil {
		return nil, errors.Join(err, resume())
	}
	in.r.log.Info("gvisor held for a fork", "sandbox", in.id, "save", time.Since(t0))
	return resume, nil
}

// ImageFormat implements runtime.Imager: runsc's release and binary, the
// agent's binary, and the host's CPU.
func (r *Runtime) ImageFormat() string {
	return r.format()
}

// SaveImage implements runtime.Imager: inst is saved to path and its
// process ended, for Stop.
func (r *Runtime) SaveImage(ctx context.Context, inst runtime.Instance, path string) error {
	in, ok := inst.(*instance)
	if !ok {
		return fmt.Errorf("save image: %T is not a gvisor sandbox", inst)
	}
	in.opMu.Lock()
	defer in.opMu.Unlock()
	switch {
	case in.stopped:
		return errors.New("the sandbox is stopped")
	case in.st.Paused:
		return errors.New("the sandbox is paused")
	}
	if err := in.freeze(ctx); err != nil {
		return err
	}
	if err := in.saveFrozen(ctx, path); err != nil {
		return errors.Join(err, in.thaw(ctx))
	}
	return in.end(path, "gvisor saved as an image")
}

// freeze stops the running sandbox's tasks where they are, once its agent
// has let go of the channel. If it fails the sandbox runs on. in.opMu is
// held.
func (in *instance) freeze(ctx context.Context) error {
	if !in.agent.release(agentLetGo) {
		in.r.log.Debug("the agent did not let go of its channel before a freeze", "sandbox", in.id)
	}
	if err := in.runsc(ctx, "pause", in.id); err != nil {
		in.agent.open()
		return fmt.Errorf("pause: %w", err)
	}
	return nil
}

// thaw runs the frozen sandbox's tasks on and waits for its agent. in.opMu
// is held.
func (in *instance) thaw(ctx context.Context) error {
	if err := in.agent.open(); err != nil {
		return err
	}
	if err := in.runsc(ctx, "resume", in.id); err != nil {
		in.agent.release(0)
		return fmt.Errorf("resume: %w", err)
	}
	if err := in.agent.conn.WaitReady(ctx); err != nil {
		return fmt.Errorf("resume: the agent did not answer: %w", err)
	}
	return nil
}

// saveFrozen saves the frozen sandbox to the image directory image
// (replaced), leaving it frozen. The image is not compressed: a paused
// sandbox's goes to the blob store in chunks, compressed there and shared
// with its earlier pauses' where its memory is the same, and sandboxes
// that start from a fork's or a memory image's would each decompress it (a
// fork of 8 took 12% less CPU and wall time without). A save that fails
// because the agent was frozen still holding its channel is tried again
// after the sandbox ran for a moment to let go. in.opMu is held.
func (in *instance) saveFrozen(ctx context.Context, image string) error {
	b := backoff.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}
	var first error
	for try := 1; ; try++ {
		if err := os.RemoveAll(image); err != nil {
			return err
		}
		if err := os.MkdirAll(image, 0o700); err != nil {
			return err
		}
		err := in.runsc(ctx, "checkpoint", "--leave-running", "--image-path", image, "--compression", "none", in.id)
		if err == nil {
			break
		}
		os.RemoveAll(image)
		if first == nil {
			first = err
		}
		if try == saveTries {
			return fmt.Errorf("checkpoint (%d tries, the first: %v): %w", try, first, err)
		}
		if err := in.runsc(ctx, "resume", in.id); err != nil {
			return fmt.Errorf("checkpoint: %v; then resume: %w", first, err)
		}
		waited := b.Wait(ctx.Done())
		if err := in.runsc(context.WithoutCancel(ctx), "pause", in.id); err != nil {
			return fmt.Errorf("checkpoint: %v; then pause: %w", first, err)
		}
		if !waited {
			return fmt.Errorf("checkpoint: %w", first)
		}
	}
	if err := os.WriteFile(filepath.Join(image, imageTokenFile), []byte(in.st.Token), 0o400); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	// The disks' host mounts hold what the sandbox wrote in the host's
	// page cache: synced, their images are the disks the image expects.
	for _, d := range []string{rootfsDir, workspaceDir} {
		if err := syncMount(filepath.Join(in.dir, d)); err != nil {
			return fmt.Errorf("checkpoint: sync the disk at %s: %w", d, err)
		}
	}
	return nil
}

// syncMount syncs the filesystem mounted at dir; a directory that is not
// there or not a mount (no workspace) has nothing to sync.
func syncMount(dir string) error {
	if mounted, err := isMountPoint(dir); err != nil || !mounted {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// end ends the saved, frozen sandbox's process and leaves it paused with
// its image, logging what. in.opMu is held.
func (in *instance) end(image string, what string) error {
	in.mu.Lock()
	p := in.proc
	in.proc = nil // its exit is planned from here on (follow)
	in.mu.Unlock()
	t0 := time.Now()
	p.Kill()
	select {
	case <-p.Done():
	case <-time.After(exitWait):
		return fmt.Errorf("checkpoint: the sandbox's process did not exit after kill")
	}
	in.mu.Lock()
	in.st.PID, in.st.StartTime, in.st.Paused, in.st.Frozen = 0, 0, true, false
	in.mu.Unlock()
	// runsc keeps the container's record until a delete, which a restore
	// needs gone first (a restore retries it). Its delete would wait until
	// the sandbox's process is reaped, by the host's init (its parent,
	// runsc run, is gone), which may take a second or more; the process
	// has exited, so the record is removed here instead.
	if err := in.r.removeRecords(in.id); err != nil {
		in.r.log.Warn("remove a saved sandbox's runsc record", "sandbox", in.id, "err", err)
	}
	var size int64
	if fi, err := os.Stat(filepath.Join(image, "checkpoint.img")); err == nil {
		size = fi.Size()
	}
	in.r.log.Info(what, "sandbox", in.id, "image_bytes", size, "stop", time.Since(t0))
	return nil
}

// restore starts the paused sandbox's Sentry again from image and waits
// for its agent. in.opMu is held. If it fails before the sandbox ran, it
// stays paused.
func (in *instance) restore(ctx context.Context, image string) error {
	t0 := time.Now()
	if err := in.r.removeRecords(in.id); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := in.agent.open(); err != nil {
		return err
	}
	if in.st.Network {
		// runsc took the link's address and routes when it started the
		// sandbox; it takes them again from the link.
		err := inNetNS(filepath.Join(in.dir, netnsFile), guest.Configure)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			in.agent.release(0)
			return fmt.Errorf("sandbox link: %w", err)
		}
	}
	if err := in.runsc(ctx, "restore", "--detach", "--bundle", in.dir, "--image-path", image, in.id); err != nil {
		in.agent.release(0)
		in.runsc(context.WithoutCancel(ctx), "delete", "--force", in.id)
		return fmt.Errorf("restore: %w", err)
	}
	if err := in.attach(ctx); err != nil {
		in.closeDone()
		return err
	}
	if err := in.agent.conn.WaitReady(ctx); err != nil {
		return fmt.Errorf("restore: the agent did not answer: %w", err)
	}
	in.r.log.Info("gvisor restored", "sandbox", in.id, "took", time.Since(t0))
	return nil
}

// syncDir syncs every file in dir, and dir.
func syncDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := syncFile(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return syncFile(dir)
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
