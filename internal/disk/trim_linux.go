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
// (free space it discarded, including space that was a hole already). It
// syncs the pool's filesystem first. Only
// the CloneReflinkXFSLoop mode trims: a filesystem the data directory
// already had keeps its operator's discard policy; Trim is then a no-op.
// Trim may be called concurrently with everything else.
func (p *Pool) Trim(ctx context.Context) error {
	if p.mode != CloneReflinkXFSLoop {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("trim disk pool: %w", err)
	}
	d, err := os.Open(p.dir)
	if err != nil {
		return fmt.Errorf("trim disk pool: %w", err)
	}
	defer d.Close()
	// XFS skips extents freed in a transaction its log has not yet
	// committed (busy extents), for up to 30 s: force the log first.
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("trim disk pool: sync %s: %w", p.dir, err)
	}
	if err := fiTrim(d.Fd()); err != nil {
		return fmt.Errorf("trim disk pool %s: %w", p.dir, err)
	}
	return nil
}

// untrimmed is how much more of the host's filesystem the XFS image takes
// than XFS uses: freed space not yet trimmed, plus what XFS keeps for
// itself (its log, free-space btrees), which no trim returns.
func (p *Pool) untrimmed() (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(p.dir, &fs); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Stat(p.image, &st); err != nil {
		return 0, err
	}
	return st.Blocks*512 - int64(fs.Blocks-fs.Bfree)*fs.Bsize, nil
}

// startTrimmer starts the goroutine that trims the XFS image (see the
// package comment for why periodically rather than with -o discard): once
// now, for what an earlier process freed, then whenever the image takes
// trimMinFreed more of the host beyond what XFS uses than after the last
// trim, checked every interval (a stat and a statfs, nothing more, when
// nothing was freed). Frees are not counted from the free space alone: a
// sandbox that writes a file and deletes it between two checks leaves the
// free space as it was, and the host's blocks taken. Close stops it.
func (p *Pool) startTrimmer(log *slog.Logger, interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	p.stopTrim = cancel
	p.trimDone = make(chan struct{})
	go func() {
		defer close(p.trimDone)
		// base is untrimmed after the last trim, lowered as it falls. It
		// may be negative: XFS counts its log as used, and the unwritten
		// part of it is a hole on the host.
		var base int64
		trimNow := true // at start, and after a trim it could not measure
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			gap, err := p.untrimmed()
			if err != nil {
				log.Warn("disk pool usage", "dir", p.dir, "image", p.image, "err", err)
			}
			if err == nil && (trimNow || gap-base >= trimMinFreed) {
				start := time.Now()
				err := p.Trim(ctx)
				if errors.Is(err, unix.EOPNOTSUPP) {
					log.Warn("the xfs image cannot be trimmed: freed space stays taken on the host", "dir", p.dir, "err", err)
					return
				}
				if err != nil {
					log.Warn("trim disk pool", "dir", p.dir, "err", err)
				}
				after, aerr := p.untrimmed()
				if err == nil && aerr == nil {
					log.Debug("trimmed disk pool", "dir", p.dir, "host_bytes_returned", gap-after,
						"took", time.Since(start))
				}
				gap, base, trimNow = after, after, aerr != nil
			}
			if err == nil && !trimNow {
				base = min(base, gap)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}
