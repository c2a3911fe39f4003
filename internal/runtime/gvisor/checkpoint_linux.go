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
	"warren/internal/guestnet"
	"warren/internal/runtime"
)

// Memory checkpoints. `runsc checkpoint` saves the Sentry, the whole
// sandbox kernel with every process's memory, to an image directory and
// ends the sandbox's processes; `runsc restore` starts a Sentry from the
// image, with the bundle's disks and network, its processes running on
// from where they were. The disks are the host's mounts, not in the image:
// a sandbox restored from an image must have the disk the image was saved
// with, or a clone of it taken while nothing ran.
//
// The agent's channel holds a host socket, which the Sentry cannot save:
// before a checkpoint the runtime closes its end and stops listening, the
// agent sees the end and closes its own, and dials again (to nobody) until
// a restored sandbox's runtime listens again.

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

// checkpointTries bounds the retries of a checkpoint that found the agent
// still holding its end of the channel (it lets go within milliseconds of
// the runtime closing its own).
const checkpointTries = 50

// Pause implements runtime.Pauser: the sandbox is checkpointed into its
// directory, durably (the image outlives the daemon), and its processes
// end. If the checkpoint fails the sandbox runs on.
func (in *instance) Pause(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	if in.st.Paused && !in.stopped {
		return nil
	}
	return in.checkpoint(ctx, filepath.Join(in.dir, memoryDir), true, "gvisor paused")
}

// Resume implements runtime.Pauser: a new Sentry is restored from the
// image, and the image removed once the agent answers.
func (in *instance) Resume(ctx context.Context) error {
	in.opMu.Lock()
	defer in.opMu.Unlock()
	switch {
	case in.stopped:
		return errors.New("the sandbox is stopped")
	case !in.st.Paused:
		return nil
	}
	image := filepath.Join(in.dir, memoryDir)
	if err := in.restore(ctx, image); err != nil {
		return err
	}
	os.RemoveAll(image)
	return nil
}

// Hold implements runtime.Forker: the sandbox is checkpointed to path and
// stays stopped until resume, which restores it from there. A clone of
// its disk taken meanwhile is the disk the image expects.
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
	if err := in.checkpoint(ctx, path, false, "gvisor held for a fork"); err != nil {
		in.opMu.Unlock()
		return nil, err
	}
	return func() error {
		defer in.opMu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := in.restore(rctx, path); err != nil {
			return fmt.Errorf("run the sandbox again after its fork: %w", err)
		}
		return nil
	}, nil
}

// SaveImage implements runtime.Imager: inst is checkpointed to path and
// left paused, for Stop.
func (r *Runtime) SaveImage(ctx context.Context, inst runtime.Instance, path string) error {
	in, ok := inst.(*instance)
	if !ok {
		return fmt.Errorf("save image: %T is not a gvisor sandbox", inst)
	}
	in.opMu.Lock()
	defer in.opMu.Unlock()
	return in.checkpoint(ctx, path, false, "gvisor saved as an image")
}

// checkpoint saves the running sandbox to the image directory image
// (replaced; synced to disk when durable) and leaves it paused: no
// process, the image in its place; what is logged with the figures.
// in.opMu is held. If it fails the sandbox runs on.
func (in *instance) checkpoint(ctx context.Context, image string, durable bool, what string) (err error) {
	switch {
	case in.stopped:
		return errors.New("the sandbox is stopped")
	case in.st.Paused:
		return errors.New("the sandbox is paused")
	}
	in.mu.Lock()
	p := in.proc
	in.proc = nil // its exit is planned from here on (follow)
	in.mu.Unlock()
	select {
	case <-p.Done():
		in.closeDone()
		return errors.New("the sandbox has exited")
	default:
	}
	defer func() {
		if err != nil {
			in.mu.Lock()
			in.proc = p
			in.mu.Unlock()
			in.agent.open()
			select {
			case <-p.Done(): // died meanwhile: it will not run on
				in.closeDone()
			default:
			}
		}
	}()
	t0 := time.Now()
	in.agent.close()
	b := backoff.Backoff{Base: 2 * time.Millisecond, Max: 20 * time.Millisecond}
	var first error
	for try := 1; ; try++ {
		if err := os.RemoveAll(image); err != nil {
			return err
		}
		if err := os.MkdirAll(image, 0o700); err != nil {
			return err
		}
		err = in.runsc(ctx, "checkpoint", "--image-path", image, in.id)
		if err == nil {
			break
		}
		if first == nil {
			first = err
		}
		// A checkpoint refused before the save leaves the sandbox
		// running; the likeliest cause is an agent that has not let go
		// of the channel yet. One that failed in the save ends it.
		select {
		case <-p.Done():
			os.RemoveAll(image)
			return fmt.Errorf("checkpoint: the sandbox ended in it: %w", first)
		default:
		}
		if try == checkpointTries || !b.Wait(ctx.Done()) {
			os.RemoveAll(image)
			if try > 1 {
				return fmt.Errorf("checkpoint (%d tries, the first: %v): %w", try, first, err)
			}
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(image, imageTokenFile), []byte(in.st.Token), 0o400); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	tSave := time.Now()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		p.Kill()
		<-p.Done()
	}
	// runsc keeps the container's record (as running) until a delete,
	// which a restore needs gone first. Its delete would wait until the
	// sandbox's process is reaped, by the host's init (its parent, runsc
	// run, is gone), which may take a second or more; the process has
	// exited, so the record is removed here instead.
	if err := in.r.removeRecords(in.id); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if durable {
		if err := syncDir(image); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	in.mu.Lock()
	in.st.PID, in.st.StartTime, in.st.Paused = 0, 0, true
	in.mu.Unlock()
	var size int64
	if fi, err := os.Stat(filepath.Join(image, "checkpoint.img")); err == nil {
		size = fi.Size()
	}
	in.r.log.Info(what, "sandbox", in.id, "image_bytes", size, "save", tSave.Sub(t0), "stop", time.Since(tSave))
	return nil
}

// restore starts the paused sandbox's Sentry again from image and waits
// for its agent. in.opMu is held. If it fails before the sandbox ran, it
// stays paused.
func (in *instance) restore(ctx context.Context, image string) error {
	t0 := time.Now()
	if err := in.agent.open(); err != nil {
		return err
	}
	if in.st.Network {
		// runsc took the link's address and routes when it started the
		// sandbox; it takes them again from the link.
		err := inNetNS(filepath.Join(in.dir, netnsFile), guestnet.Configure)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			in.agent.close()
			return fmt.Errorf("sandbox link: %w", err)
		}
	}
	if err := in.runsc(ctx, "restore", "--detach", "--bundle", in.dir, "--image-path", image, in.id); err != nil {
		in.agent.close()
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
