package procid

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseStat(t *testing.T) {
	for _, tt := range []struct {
		name, stat string
		want       uint64
		ok         bool
	}{
		{"plain", "1234 (sleep) S 1 1234 1234 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 98765 1000 100", 98765, true},
		{"name with spaces and parens", "1234 (a) b (c)) S 1 1234 1234 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 42 1000 100", 42, true},
		{"no parenthesis", "1234 sleep S 1", 0, false},
		{"too few fields", "1234 (sleep) S 1 1234", 0, false},
		{"start time not a number", "1234 (sleep) S 1 1234 1234 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 x 1000 100", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(1234, []byte(tt.stat))
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("parseStat = %d, %v; want %d, ok %v", got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestOpenSelf(t *testing.T) {
	pid := os.Getpid()
	start, err := StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if !Is(pid, start) {
		t.Fatal("Is(self, own start time) = false")
	}
	if Is(pid, start+1) {
		t.Fatal("Is(self, another start time) = true")
	}
	pidfd, err := Open(pid, start)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if Exited(pidfd) {
		t.Fatal("Exited(own pidfd) = true")
	}
	if _, err := Open(pid, start+1); !errors.Is(err, ErrGone) {
		t.Fatalf("Open with another start time: %v, want ErrGone", err)
	}
	if _, err := Open(0, start); !errors.Is(err, ErrGone) {
		t.Fatalf("Open(0): %v, want ErrGone", err)
	}
}

func TestExitedChild(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep: %v", err)
	}
	pid := cmd.Process.Pid
	start, err := StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	pidfd, err := Open(pid, start)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	cmd.Process.Kill()
	// Not reaped yet: a zombie keeps its pid and start time, and Exited
	// tells it has ended.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, 10000); err != nil {
		t.Fatal(err)
	}
	if !Exited(pidfd) {
		t.Fatal("Exited after kill = false")
	}
	cmd.Wait()
	if _, err := Open(pid, start); !errors.Is(err, ErrGone) {
		t.Fatalf("Open of a reaped process: %v, want ErrGone", err)
	}
}
