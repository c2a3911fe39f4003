//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/internal/wait"
)

// TestDiskSpaceReturns is the regression test of issue 13, item 5: freed
// blocks never went back to the host, so the pool's reflink.xfs grew from
// 1.2 to 4.2 GB and stayed there after every sandbox was deleted. 256 MiB
// written in a sandbox and deleted there, then 256 MiB written and the
// sandbox deleted, must each leave the host's usage of the pool image near
// where it started (the sandbox's ext4 discards, its loop device punches
// holes in its image, the pool's trimmer trims the XFS image).
func TestDiskSpaceReturns(t *testing.T) {
	need(t)
	image := filepath.Join(shared.dataDir, "reflink.xfs")
	if _, err := os.Stat(image); err != nil {
		t.Skipf("the suite's pool is no xfs loop image (%v): the host's own filesystem keeps its own discard policy", err)
	}
	const written = 256 << 20
	id := shared.newSandbox(t)
	// What the create wrote is trimmed like the rest: wait for it to settle.
	base := hostUsage(t, image)
	wait.For(t, 30*time.Second, "the pool image's usage to settle", func() bool {
		time.Sleep(time.Second) // settled is unchanged over a second: the sampling period, not a wait
		now := hostUsage(t, image)
		defer func() { base = now }()
		return now >= base-(1<<20) && now <= base+(1<<20)
	})
	write := "dd if=/dev/urandom of=/root/scratch bs=1M count=256 conv=fsync status=none"
	// writeAndFree writes in the sandbox, frees it with free, and waits
	// for the host's usage to come back.
	writeAndFree := func(what string, free func()) {
		t.Helper()
		shared.sh(t, id, write)
		full := hostUsage(t, image)
		if full < base+written*7/8 {
			// XFS wrote into free space that still took host blocks.
			t.Fatalf("the pool image grew by %d MiB for %d MiB written: its free space was not trimmed", (full-base)>>20, written>>20)
		}
		t0 := time.Now()
		free()
		wait.For(t, 30*time.Second, fmt.Sprintf("the pool image to give back what %s freed (back within %d MiB of %d MiB)", what, written>>23, base>>20),
			func() bool { return hostUsage(t, image) <= base+written/8 })
		t.Logf("%s: pool image %d MiB, %d MiB with the data, back to %d MiB in %v",
			what, base>>20, full>>20, hostUsage(t, image)>>20, time.Since(t0).Round(100*time.Millisecond))
	}

	writeAndFree("a file deleted in the sandbox", func() { shared.sh(t, id, "rm /root/scratch && sync") })
	writeAndFree("the sandbox's delete", func() {
		if err := shared.client().DeleteSandbox(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	})
}

// hostUsage is how much of the host's filesystem path takes (st_blocks).
func hostUsage(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
