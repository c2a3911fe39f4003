package hostclaim

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTakeLowestFree(t *testing.T) {
	s, err := OpenAt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n0, f0, err := s.Take(4, nil)
	if err != nil || n0 != 0 {
		t.Fatalf("first Take = %d, %v", n0, err)
	}
	// Another server (another Set on the same directory) skips it.
	other, _ := OpenAt(s.dir)
	n1, f1, err := other.Take(4, nil)
	if err != nil || n1 != 1 {
		t.Fatalf("second Take = %d, %v; want 1", n1, err)
	}
	n2, f2, err := s.Take(4, func(n int) bool { return n == 2 })
	if err != nil || n2 != 3 {
		t.Fatalf("Take skipping 2 = %d, %v; want 3", n2, err)
	}
	if _, _, err := s.Take(4, func(n int) bool { return n == 2 }); !errors.Is(err, ErrTaken) {
		t.Errorf("Take with every slot held: %v, want ErrTaken", err)
	}
	f1.Close()
	if n, f, err := s.Take(4, nil); err != nil || n != 1 {
		t.Errorf("Take after slot 1 was released = %d, %v; want 1", n, err)
	} else {
		f.Close()
	}
	f0.Close()
	f2.Close()
}

// TestClaimLivesWithItsHolder: a claim passed to a child outlives the
// claimer's copy, is taken back from the child, and frees once both are
// gone.
func TestClaimLivesWithItsHolder(t *testing.T) {
	s, err := OpenAt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n, f, err := s.Take(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{f} // its fd 3
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	f.Close() // the daemon died, say
	if got, g, err := s.Take(2, nil); err != nil || got == n {
		t.Fatalf("Take while the child holds slot %d = %d, %v", n, got, err)
	} else {
		g.Close()
	}
	pidfd, err := unix.PidfdOpen(child.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if _, err := s.Adopt(n+1, pidfd, 3); err == nil {
		t.Error("Adopt of the wrong slot: no error")
	}
	back, err := s.Adopt(n, pidfd, 3)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	child.Process.Kill()
	child.Wait()
	if got, g, err := s.Take(1, nil); err == nil {
		g.Close()
		t.Fatalf("Take while the adopted claim is held = %d; want slot %d still taken", got, n)
	}
	back.Close()
	if got, g, err := s.Take(1, nil); err != nil || got != n {
		t.Errorf("Take once every holder is gone = %d, %v; want %d", got, err, n)
	} else {
		g.Close()
	}
}
