//go:build linux

package fusefile

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// requireIOFlusher skips a test when this process may not use
// PR_SET_IO_FLUSHER: both it and PR_GET_IO_FLUSHER need CAP_SYS_RESOURCE,
// which even root lacks where the bounding set has dropped it.
func requireIOFlusher(t *testing.T) {
	t.Helper()
	if _, err := IsIOFlusher(); errors.Is(err, unix.EPERM) {
		t.Skip("needs CAP_SYS_RESOURCE for PR_SET_IO_FLUSHER, which this process lacks (check CapBnd in /proc/self/status)")
	} else if err != nil {
		t.Skipf("kernel without PR_GET_IO_FLUSHER (Linux 5.6): %v", err)
	}
}

// childEnv makes the test binary, run again, act as the child of
// TestStartIOFlusher instead of running tests.
const childEnv = "FUSEFILE_IOFLUSHER_CHILD"

// TestIOFlusherChild is the child's side of TestStartIOFlusher: it reports
// whether the main thread and threads the runtime starts later are I/O
// flushers. It skips unless run as that child.
func TestIOFlusherChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only as the child of TestStartIOFlusher")
	}
	const threads = 8
	results := make([]string, threads)
	var wg sync.WaitGroup
	var start sync.WaitGroup
	start.Add(threads)
	for i := range threads {
		wg.Go(func() {
			runtime.LockOSThread() // ends the thread with the goroutine: the next one is new
			start.Done()
			start.Wait() // all locked at once: threads distinct
			ok, err := IsIOFlusher()
			results[i] = fmt.Sprint(ok, err)
		})
	}
	wg.Wait()
	fmt.Printf("flusher: %s\n", strings.Join(results, ","))
}

// TestStartIOFlusher starts the test binary again through StartIOFlusher
// and checks that every thread of the child is an I/O flusher, that a child
// started plainly is not, and that the starting thread's flag went back.
// It needs CAP_SYS_RESOURCE, which the development host's bounding set
// lacks; there it was run in a QEMU guest (Debian's 6.1 cloud kernel, the
// test binary started by a minimal init), where it passed, and failed when
// StartIOFlusher did not set the flag or did not clear it again.
func TestStartIOFlusher(t *testing.T) {
	requireIOFlusher(t)
	child := func(start func(*exec.Cmd) error) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestIOFlusherChild$", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := start(cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child: %v: %s", err, out.String())
		}
		for l := range strings.Lines(out.String()) {
			if s, ok := strings.CutPrefix(l, "flusher: "); ok {
				return strings.TrimSpace(s)
			}
		}
		t.Fatalf("child printed no result: %s", out.String())
		return ""
	}
	all := func(v string) string { return strings.TrimSuffix(strings.Repeat(v+",", 8), ",") }

	if got, want := child(StartIOFlusher), all("true <nil>"); got != want {
		t.Errorf("child started by StartIOFlusher: threads report %s, want %s", got, want)
	}
	if got, want := child((*exec.Cmd).Start), all("false <nil>"); got != want {
		t.Errorf("child started plainly: threads report %s, want %s", got, want)
	}

	// Every thread of this process, the one StartIOFlusher used among them,
	// is still not a flusher. Locking as many goroutines as there are
	// threads covers them all.
	threads, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := len(threads) + 4
	var wg, start sync.WaitGroup
	start.Add(n)
	var flushers sync.Map
	for range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			start.Done()
			start.Wait()
			if ok, err := IsIOFlusher(); ok || err != nil {
				flushers.Store(fmt.Sprint(ok, err), true)
			}
		})
	}
	wg.Wait()
	flushers.Range(func(k, _ any) bool {
		t.Errorf("a thread of the parent reports %v after StartIOFlusher", k)
		return true
	})
}

// TestStartIOFlusherWithoutCapability checks that, where the flag cannot be
// set, StartIOFlusher says so and does not start the command.
func TestStartIOFlusherWithoutCapability(t *testing.T) {
	if _, err := IsIOFlusher(); !errors.Is(err, unix.EPERM) {
		t.Skipf("this process may use PR_SET_IO_FLUSHER (%v): TestStartIOFlusher covers it", err)
	}
	cmd := exec.Command("true")
	if err := StartIOFlusher(cmd); !errors.Is(err, unix.EPERM) {
		t.Errorf("StartIOFlusher without CAP_SYS_RESOURCE: %v, want EPERM", err)
	}
	if cmd.Process != nil {
		cmd.Wait()
		t.Error("StartIOFlusher started the command although the flag was not set")
	}
}
