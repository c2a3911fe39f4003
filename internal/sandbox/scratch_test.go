package sandbox

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"warren/api"
)

// TestScratchGrows: an import's scratch holds the node's free disk in
// steps as it writes, and is refused once the next step would take the
// disk below its reserve, with what is refused named.
func TestScratchGrows(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	freeMB := int64(st.Bavail) * st.Bsize >> 20
	if freeMB < 2048 {
		t.Skipf("%d MiB free under %s: too little to measure holds in", freeMB, dir)
	}
	// A reserve that leaves 1 GiB above it, whatever the disk holds.
	c, a := newCapacity(host, Admission{ReserveDiskMB: freeMB - 1024})
	m := &Manager{deps: Deps{StateDir: dir}, ledger: newLedger(c, a.Tenant)}
	sc := m.newScratch("image imports are")
	if err := sc.add(1); err != nil {
		t.Fatal(err)
	}
	if sc.held != scratchStep {
		t.Errorf("1 byte holds %d bytes, want a step of %d", sc.held, scratchStep)
	}
	if err := sc.add(600 << 20); err != nil {
		t.Fatal(err)
	}
	err := sc.add(1 << 30)
	if !api.IsCode(err, api.CodeInsufficientStorage) || !strings.Contains(err.Error(), "image imports are refused") {
		t.Fatalf("past the room above the reserve: %v", err)
	}
	if sc.used != 600<<20+1 {
		t.Errorf("used %d after a refusal, want what was added before it", sc.used)
	}
	sc.release()
	if m.ledger.scratchMB != 0 {
		t.Errorf("%d MiB held after the release", m.ledger.scratchMB)
	}
}
