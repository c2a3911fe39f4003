// Package consolelog keeps what a sandbox's init writes to its console (a
// container's agent, a VM's serial console through QEMU) in a log file of
// bounded size on the host, whatever the sandbox makes it write.
//
// The writer holds the write end of a FIFO in the sandbox's directory, never
// the log file itself; the daemon drains the FIFO into the log and, each time
// the log reaches its maximum, keeps only the newest half of it. So the log
// holds between Max/2 and Max bytes of the latest output, and the host's disk
// never takes more. The FIFO outlives the daemon: after a restart the new
// daemon opens it again (Drain) and goes on draining. While no daemon
// drains, a write fails (EPIPE: the writer must not die of SIGPIPE, which
// QEMU ignores and the agent's raw writes are immune to) or, once the pipe
// is full, would block: Writer opens it non-blocking for writers that must
// never wait.
package consolelog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Max is the most a console log holds on the host.
const Max = 1 << 20

// Drain copies what is written to a FIFO into a log file; see the package
// comment.
type Drain struct {
	fifo *os.File
	// hold is a write end of the FIFO kept open, never written: reads then
	// never see end-of-file, not before the init opens the FIFO nor after
	// it is gone; Stop ends the drain.
	hold *os.File
	log  *os.File
	size int64 // of log; only run touches it
	max  int64
	done chan struct{}
}

// Start makes the FIFO at fifo (if missing) and drains it into the log file
// at log, which keeps at most max bytes (Max when 0). It returns once the
// FIFO is open for reading, so that a writer may then open it.
func Start(fifo, log string, max int64) (*Drain, error) {
	if max <= 0 {
		max = Max
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("console fifo: %w", err)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode().Type() != fs.ModeNamedPipe {
		return nil, fmt.Errorf("console fifo %s: not a FIFO (%v)", fifo, err)
	}
	// Non-blocking: opening for reading does not wait for a writer, and
	// reads wait in the runtime's poller.
	r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("console fifo: %w", err)
	}
	hold, err := Writer(fifo)
	if err != nil {
		r.Close()
		return nil, err
	}
	l, err := os.OpenFile(log, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		r.Close()
		hold.Close()
		return nil, fmt.Errorf("console log: %w", err)
	}
	fi, err := l.Stat()
	if err != nil {
		r.Close()
		hold.Close()
		l.Close()
		return nil, fmt.Errorf("console log: %w", err)
	}
	d := &Drain{fifo: r, hold: hold, log: l, size: fi.Size(), max: max, done: make(chan struct{})}
	go d.run()
	return d, nil
}

// Writer opens the write end of the FIFO, non-blocking, for an init's
// stdout and stderr; a Drain must have it open for reading.
func Writer(fifo string) (*os.File, error) {
	fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("console fifo: %w", err)
	}
	return os.NewFile(uintptr(fd), fifo), nil
}

// Stop ends the drain and closes the log. A writer still holding the FIFO
// gets EPIPE from then on, until the next Start.
func (d *Drain) Stop() {
	d.fifo.Close()
	<-d.done
	d.hold.Close()
}

// run drains until Stop closes the FIFO.
func (d *Drain) run() {
	defer close(d.done)
	defer d.log.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := d.fifo.Read(buf)
		if n > 0 {
			d.append(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// append writes p to the log, first halving the log when p would take it
// past its maximum. Write errors are dropped: the log is for people, and
// the drain must go on so that writers never block.
func (d *Drain) append(p []byte) {
	if int64(len(p)) > d.max/2 {
		p = p[int64(len(p))-d.max/2:]
	}
	if d.size+int64(len(p)) > d.max {
		d.keepNewest()
	}
	n, _ := d.log.Write(p)
	d.size += int64(n)
}

// keepNewest moves the newest half of the log to its start and cuts the
// rest.
func (d *Drain) keepNewest() {
	keep := min(d.max/2, d.size)
	tail := make([]byte, keep)
	n, _ := d.log.ReadAt(tail, d.size-keep)
	// The log is O_APPEND: truncate first, then the write lands at 0.
	if d.log.Truncate(0) == nil {
		d.size = 0
		w, _ := d.log.Write(tail[:n])
		d.size = int64(w)
	}
}
