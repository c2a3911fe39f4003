// Package hostclaim hands out numbered slots that are unique on the host
// across every warren server, whatever its data directory: the container
// runtime's uid ranges (one slot, one range of host uids). Two servers on
// one host (a user's warren and a test suite's daemons, say) would
// otherwise give two sandboxes the same host uids, and with them shared
// kernel accounting (RLIMIT_NPROC, inotify and user namespace counts,
// keyrings).
//
// A slot is an flock on the file DIR/<n>. The lock belongs to the open
// file, which the claimer passes on to the process that uses the slot (a
// sandbox's init), so it lasts exactly as long as either holds it: not a
// moment less when the daemon dies, and a restarted daemon takes its
// adopted sandboxes' claims back from their inits (Adopt). A slot whose
// holders are all gone is free again, even after a crash.
package hostclaim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Dir is the default directory of the claims' lock files.
const Dir = "/run/warren/claims"

// Set is one kind of slot in a directory of lock files.
type Set struct{ dir string }

// Open makes (if missing) and returns the set of slots of kind, under Dir.
func Open(kind string) (*Set, error) { return OpenAt(filepath.Join(Dir, kind)) }

// OpenAt is Open on an explicit directory.
func OpenAt(dir string) (*Set, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	return &Set{dir: dir}, nil
}

// ErrTaken is returned when every slot asked for is taken.
var ErrTaken = errors.New("every slot is taken")

// Take claims the lowest slot below max that no process on the host holds
// and skip does not rule out (slots this server already uses). The
// returned file holds the claim: pass it on to the slot's user, and close
// it when done.
func (s *Set) Take(max int, skip func(n int) bool) (int, *os.File, error) {
	for n := range max {
		if skip != nil && skip(n) {
			continue
		}
		f, err := os.OpenFile(filepath.Join(s.dir, strconv.Itoa(n)), os.O_RDONLY|os.O_CREATE, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("claim slot %d: %w", n, err)
		}
		switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
		case err == nil:
			return n, f, nil
		case errors.Is(err, unix.EWOULDBLOCK):
			f.Close()
		default:
			f.Close()
			return 0, nil, fmt.Errorf("claim slot %d: %w", n, err)
		}
	}
	return 0, nil, fmt.Errorf("claim a slot below %d: %w", max, ErrTaken)
}

// Adopt takes back the claim of slot n from process pidfd, which holds it
// as its descriptor fd: the result is the same open file, so the claim
// lasts while either holds it. It fails if that descriptor is not slot n's
// locked file.
func (s *Set) Adopt(n, pidfd, fd int) (*os.File, error) {
	got, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return nil, fmt.Errorf("take back slot %d's claim: %w", n, err)
	}
	f := os.NewFile(uintptr(got), filepath.Join(s.dir, strconv.Itoa(n)))
	var held, want unix.Stat_t
	if err := unix.Fstat(got, &held); err != nil {
		f.Close()
		return nil, fmt.Errorf("take back slot %d's claim: %w", n, err)
	}
	if err := unix.Stat(filepath.Join(s.dir, strconv.Itoa(n)), &want); err != nil || held.Dev != want.Dev || held.Ino != want.Ino {
		f.Close()
		return nil, fmt.Errorf("take back slot %d's claim: descriptor %d is not its lock file (%v)", n, fd, err)
	}
	// Locking again through the same open file is a no-op when it holds
	// the lock; it fails when another one does.
	if err := unix.Flock(got, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("take back slot %d's claim: %w", n, err)
	}
	return f, nil
}
