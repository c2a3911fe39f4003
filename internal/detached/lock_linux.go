package detached

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/backoff"
	"warren/internal/procid"
)

// ErrLocked means another process holds the lock.
var ErrLocked = errors.New("another process holds the lock")

// Lock takes the flock on path, a helper's one-per-data-directory lock,
// held while the file returned is open, and records this process in it
// (PID and start time), for Signal to reach it by across PID reuse. A lock
// another process holds is an error wrapping ErrLocked.
func Lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	pid := os.Getpid()
	start, err := procid.StartTime(pid)
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.WriteAt(fmt.Appendf(nil, "%d %d\n", pid, start), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// Holder reads the process that locked f, as Lock recorded it.
func Holder(f *os.File) (pid int, start uint64, err error) {
	b := make([]byte, 64)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, err
	}
	line, _, ok := strings.Cut(string(b[:n]), "\n")
	p, s, ok2 := strings.Cut(line, " ")
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("lock %q: not PID START", b[:n])
	}
	if pid, err = strconv.Atoi(p); err == nil {
		start, err = strconv.ParseUint(s, 10, 64)
	}
	return pid, start, err
}

// Signal sends sig to the process holding the lock at path, through a
// pidfd of the process it recorded, as often as it finds it holding it,
// and returns once the lock is free (it takes it, and lets it go), or an
// error when ctx ends first. It returns the PID it signalled, 0 when none
// held the lock.
func Signal(ctx context.Context, path string, sig unix.Signal) (int, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	defer f.Close() // and with it the lock, once taken
	signalled := 0
	err = backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}, func() (bool, error) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err == nil, err
		}
		// The holder may not have recorded itself yet, or be exiting:
		// look again at the next poll.
		pid, start, err := Holder(f)
		if err != nil {
			return false, nil
		}
		pidfd, err := procid.Open(pid, start)
		if err != nil {
			return false, nil
		}
		defer unix.Close(pidfd)
		if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return false, fmt.Errorf("signal %d: %w", pid, err)
		}
		signalled = pid
		return false, nil
	})
	if err != nil {
		return signalled, fmt.Errorf("%s: %w", path, err)
	}
	return signalled, nil
}
