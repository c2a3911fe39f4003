//go:build linux

package leasewatch

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// leaseFile is the file in the data directory holding the node's last
// renewal of its lease, one line:
//
//	BOOT-ID SENT-NS WALL CRC
//
// BOOT-ID is the host's boot ID when it was written, SENT-NS the host's
// boot clock (CLOCK_BOOTTIME, in nanoseconds) when the renewing heartbeat
// was sent, WALL the same instant in UTC (for people and logs only) and
// CRC the CRC-32 of what comes before it, in hex.
//
// The node rewrites the line in place at every heartbeat, without fsync:
// a crash of the host ends its sandboxes too, so the file need not survive
// one, and an in-place write needs no new block on a full disk nor a sync
// that a busy disk could stall past the lease. A reader may see a write
// half done: the CRC tells, and the reader keeps the last whole line it
// read, which a torn one can never extend.
const leaseFile = "lease"

// wallLayout writes WALL at a fixed width.
const wallLayout = "2006-01-02T15:04:05.000000000Z"

// renewal is a line of the lease file.
type renewal struct {
	boot string        // the host's boot ID
	sent time.Duration // the boot clock when the heartbeat was sent
	wall time.Time     // the same instant on the wall clock
}

// encode is r's line.
func (r renewal) encode() []byte {
	s := fmt.Sprintf("%s %019d %s", r.boot, r.sent.Nanoseconds(), r.wall.UTC().Format(wallLayout))
	return fmt.Appendf(nil, "%s %08x\n", s, crc32.ChecksumIEEE([]byte(s)))
}

// errTorn is a lease file whose line is not whole: a write under way, or
// damage.
var errTorn = errors.New("the lease file holds no whole renewal")

// decode reads the first line of b, as encode wrote it.
func decode(b []byte) (renewal, error) {
	line, _, ok := strings.Cut(string(b), "\n")
	if !ok {
		return renewal{}, errTorn
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return renewal{}, errTorn
	}
	sum, err := strconv.ParseUint(line[i+1:], 16, 32)
	if err != nil || uint32(sum) != crc32.ChecksumIEEE([]byte(line[:i])) {
		return renewal{}, errTorn
	}
	f := strings.Fields(line[:i])
	if len(f) != 3 {
		return renewal{}, errTorn
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return renewal{}, errTorn
	}
	wall, err := time.Parse(wallLayout, f[2])
	if err != nil {
		return renewal{}, errTorn
	}
	return renewal{boot: f[0], sent: time.Duration(ns), wall: wall}, nil
}

// lapsed reports whether the lease renewed by r, lasting lease, is over at
// boot-clock time now. The store granted it from the heartbeat's sending,
// so it ends lease after that, however late the answer came back.
func lapsed(r renewal, now, lease time.Duration) bool {
	return now-r.sent > lease
}

// bootClock reads CLOCK_BOOTTIME: the same clock in every process of the
// host, never stepped like the wall clock, and counting time suspended,
// as the fleet's other members count it.
func bootClock() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("read the boot clock: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// bootID is the host's boot ID: a lease file written in another boot
// renews nothing that runs now.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read the boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// renewalAt is the renewal by a heartbeat sent at sent, in boot boot:
// sent's own monotonic reading says how long ago that was.
func renewalAt(boot string, sent time.Time) (renewal, error) {
	now, err := bootClock()
	if err != nil {
		return renewal{}, err
	}
	return renewal{boot: boot, sent: now - time.Since(sent), wall: sent}, nil
}
