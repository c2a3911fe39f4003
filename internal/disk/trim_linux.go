//go:build linux

package disk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// trimMinFreed is how much the pool's free space must have grown since the
// last trim for the trimmer to trim again: one sandbox's deleted scratch
// file, not the few blocks a busy sandbox frees every second.
const trimMinFreed = 8 << 20

// Trim discards every free extent of the pool's XFS image, so that the
// loop device punches the matching holes in the image file and the host's
// filesystem gets the space back. It returns the bytes XFS reports trimmed
// (free space it discarded, including space that was a hole already). Only
// the CloneReflinkXFSLoop mode trims: a filesystem the data directory
// already had keeps its operator's discard policy; Trim is then a no-op.
// Trim may be called concurrently with everything else.
func (p *Pool) Trim(ctx context.Context) (uint64, error) {
	if p.mode != CloneReflinkXFSLoop {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("trim disk pool: %w", err)
	}
	d, err := os.Open(p.dir)
	if err != nil {
		return 0, fmt.Errorf("trim disk pool: %w", err)
	}
	defer d.Close()
	n, err := fiTrim(d.Fd())
	if err != nil {
		return 0, fmt.Errorf("trim disk pool %s: %w", p.dir, err)
	}
	return n, nil
}

// freeBytes is the free space of the pool's filesystem.
func (p *Pool) freeBytes() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p.dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bfree) * st.Bsize, nil
}

// startTrimmer starts the goroutine that trims the XFS image (see the
// package comment for why periodically rather than with -o discard): once
// now, for what an earlier process freed, then whenever the free space has
// grown by trimMinFreed since the last trim, checked every interval (a
// statfs, nothing more, when nothing was freed). Close stops it.
func (p *Pool) startTrimmer(log *slog.Logger, interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	p.stopTrim = cancel
	p.trimDone = make(chan struct{})
	go func() {
		defer close(p.trimDone)
		low := int64(-1) // the lowest free space seen since the last trim; -1: trim now
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			free, err := p.freeBytes()
			if err != nil {
				log.Warn("disk pool free space", "dir", p.dir, "err", err)
			}
			if err == nil && (low < 0 || free-low >= trimMinFreed) {
				start := time.Now()
				n, err := p.Trim(ctx)
				if errors.Is(err, unix.EOPNOTSUPP) {
					log.Warn("the xfs image cannot be trimmed: freed space stays taken on the host", "dir", p.dir, "err", err)
					return
				}
				if err != nil {
					log.Warn("trim disk pool", "dir", p.dir, "err", err)
				} else {
					log.Debug("trimmed disk pool", "dir", p.dir, "freed_since_last", max(free-low, 0),
						"trimmed", n, "took", time.Since(start))
				}
				free, err = p.freeBytes()
				if err != nil {
					free = -1
				}
				low = free
			}
			low = min(low, free)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}
