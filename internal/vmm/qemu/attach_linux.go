//go:build linux

package qemu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"warren/internal/cleanup"
	"warren/internal/consolelog"
	"warren/internal/procid"
	"warren/internal/vmm"
)

// Attach takes over a machine that another process started with this
// VMM's options (an earlier daemon: QEMU outlives it, see vmm/jail) and
// that still runs: process pid, whose start time (field 22 of
// /proc/PID/stat, Machine.StartTime) was startTime, running as uid
// (Machine.UID). cfg must be the Config it was started with; Attach uses
// its ID (the cgroup), WorkDir (the QMP socket and QEMU's log) and
// AgentSocket (removed when the machine ends), and checks none of its
// files. It reserves uid (an error if it is outside the VMM's range or a
// live machine holds it), opens the machine's cgroup and connects to QMP:
// QEMU's QMP socket takes a new client once the earlier one is gone. ctx
// bounds the attach (default callTimeout), not the machine's life.
//
// If the process has exited, or pid now names another process, the error
// wraps vmm.ErrExited. On any error Attach leaves the process alone: the
// caller decides whether to kill it (its cgroup holds it).
//
// The machine then behaves as a started one, except that its exit status
// cannot be read (vmm.Exit.StatusUnknown; see waitProcess).
func (v *VMM) Attach(ctx context.Context, cfg vmm.Config, pid int, startTime uint64, uid uint32) (_ *Machine, err error) {
	if pid <= 0 {
		return nil, fmt.Errorf("attach machine %s: %w: no pid", cfg.ID, vmm.ErrExited)
	}
	log := v.log.With("sandbox", cfg.ID)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	var undo cleanup.Stack
	defer undo.RunIf(&err)
	defer func() {
		if err != nil {
			err = fmt.Errorf("attach machine %s: %w", cfg.ID, err)
		}
	}()

	pidfd, err := procid.Open(pid, startTime)
	if errors.Is(err, procid.ErrGone) {
		return nil, fmt.Errorf("%w: process %d is not the machine's any more", vmm.ErrExited, pid)
	}
	if err != nil {
		return nil, err
	}
	undo.Add(func() { unix.Close(pidfd) })
	if procid.Exited(pidfd) {
		return nil, fmt.Errorf("%w: process %d ended", vmm.ErrExited, pid)
	}
	if err := v.reserveUID(uid, pidfd); err != nil {
		return nil, err
	}
	undo.Add(func() { v.freeUID(uid) })
	cg, err := v.opts.Cgroups.Open(cfg.ID)
	if err != nil {
		return nil, err
	}
	m := v.newMachine(cfg, log, pid, pidfd, uid, cg)
	m.start = startTime
	if fifo := filepath.Join(cfg.WorkDir, consoleFIFOName); isFIFO(fifo) {
		if m.console, err = consolelog.Start(fifo, cfg.ConsoleLog, 0); err != nil {
			log.Warn("console not drained", "err", err)
		}
		undo.Add(func() {
			if m.console != nil {
				m.console.Stop()
			}
		})
	}
	qmp, err := Dial(ctx, m.qmpSock, log)
	if err != nil && procid.Exited(pidfd) {
		err = fmt.Errorf("%w: process %d ended", vmm.ErrExited, pid)
	}
	if err != nil {
		return nil, fmt.Errorf("connect qmp: %w", err)
	}
	m.qmp = qmp
	events, _ := qmp.Subscribe(64)
	go m.watchEvents(events)
	go m.waitProcess()
	go m.reap()
	log.Info("machine attached", "pid", pid, "uid", uid)
	return m, nil
}

func isFIFO(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode().Type() == fs.ModeNamedPipe
}
