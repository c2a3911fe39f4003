package fsfreeze

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		err   error
		thaw  bool
		want  error
		errno unix.Errno
	}{
		{"frozen twice", unix.EBUSY, false, ErrFrozen, unix.EBUSY},
		{"no freeze_fs", unix.EOPNOTSUPP, false, ErrUnsupported, unix.EOPNOTSUPP},
		{"not a filesystem ioctl", unix.ENOTTY, false, ErrUnsupported, unix.ENOTTY},
		{"freeze EINVAL", unix.EINVAL, false, ErrUnsupported, unix.EINVAL},
		{"freeze EPERM", unix.EPERM, false, nil, unix.EPERM},
		{"thaw not frozen", unix.EINVAL, true, ErrNotFrozen, unix.EINVAL},
		{"thaw EPERM", unix.EPERM, true, nil, unix.EPERM},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := freezeError(tt.err)
			if tt.thaw {
				got = thawError(tt.err)
			}
			if tt.want != nil && !errors.Is(got, tt.want) {
				t.Errorf("got %v, want it to wrap %v", got, tt.want)
			}
			if !errors.Is(got, tt.errno) {
				t.Errorf("got %v, want it to wrap errno %v", got, tt.errno)
			}
		})
	}
	if freezeError(nil) != nil || thawError(nil) != nil {
		t.Error("nil errors are not nil")
	}
}

// procfs cannot be frozen and is never frozen: the calls reach the kernel
// without any risk to the host. Without CAP_SYS_ADMIN the kernel answers
// EPERM before it looks at the filesystem.
func TestProcfs(t *testing.T) {
	f, err := os.Open("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	root := os.Geteuid() == 0
	if err := Freeze(int(f.Fd())); root && !errors.Is(err, ErrUnsupported) || !root && !errors.Is(err, unix.EPERM) {
		t.Errorf("Freeze(/proc) = %v (root %v)", err, root)
	}
	if err := Thaw(int(f.Fd())); root && !errors.Is(err, ErrNotFrozen) || !root && !errors.Is(err, unix.EPERM) {
		t.Errorf("Thaw(/proc) = %v (root %v)", err, root)
	}
}
