//go:build linux

package leasewatch

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"warren/internal/wait"
)

// The test binary plays the watchdog when Start re-executes it, and the
// daemon that starts one when a test runs it with nodeEnv.
const (
	// killedEnv names the file where a re-executed watchdog records the
	// sandboxes it would kill, one a line, instead of killing them; without
	// it, it kills through the host's cgroups.
	killedEnv = "WARREN_LEASEWATCH_TEST_KILLED"
	// nodeEnv makes the test binary a daemon that starts a watchdog on
	// $dataEnv, renews the lease once if it is "renew", and exits 0.
	nodeEnv = "WARREN_LEASEWATCH_TEST_NODE"
	dataEnv = "WARREN_LEASEWATCH_TEST_DATA"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		var k Killer
		if path := os.Getenv(killedEnv); path != "" {
			k = fileRecorder(path)
		}
		if err := runCommand(context.Background(), os.Args[2:], os.Stderr, k); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if mode := os.Getenv(nodeEnv); mode != "" {
		if err := helperNode(mode, os.Getenv(dataEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fileRecorder is the re-executed watchdog's recorder: one line per Kill,
// appended to the file it names.
type fileRecorder string

func (r fileRecorder) Kill(ctx context.Context, id string) error {
	f, err := os.OpenFile(string(r), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(id + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func helperNode(mode, dataDir string) error {
	w, err := Start(Options{DataDir: dataDir, StateDir: filepath.Join(dataDir, "sandboxes"), Lease: 500 * time.Millisecond,
		Log: testLogTo(os.Stderr)})
	if err != nil {
		return err
	}
	if mode == "renew" {
		w.Renew(time.Now())
	}
	return nil
}

// recording makes every watchdog the test starts record what it would
// kill in a file, whose lines killed reads.
func recording(t *testing.T) (killed func() []string) {
	path := filepath.Join(t.TempDir(), "killed")
	t.Setenv(killedEnv, path)
	return func() []string {
		b, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return slices.Sorted(slices.Values(strings.Fields(string(b))))
	}
}

// start is Start, with the watchdog stopped (its data directory removed)
// and reaped when the test ends.
func start(t *testing.T, o Options) *Watch {
	t.Helper()
	w, err := Start(o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(o.DataDir, logFile))
			t.Logf("the watchdog's log:\n%s", b)
		}
		os.RemoveAll(o.DataDir)
		exitOf(t, w, "the watchdog to exit with its data directory")
		w.lease.Close()
	})
	return w
}

// exitOf waits until the watchdog w last started has exited.
func exitOf(t *testing.T, w *Watch, what string) {
	t.Helper()
	select {
	case <-w.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func running(w *Watch) bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

// TestStartRenewLapse: the watchdog Start runs in its own process fires on
// a lapsed lease and exits; the next renewal starts a new one, which
// guards the new lease.
func TestStartRenewLapse(t *testing.T) {
	killed := recording(t)
	const lease = 500 * time.Millisecond
	o := node(t, lease, "sb-a", "sb-b")
	w := start(t, o)
	first := holderOf(t, o)
	sent := time.Now()
	w.Renew(sent)
	exitOf(t, w, "the watchdog to fire and exit")
	if since := time.Since(sent); since < lease {
		t.Errorf("the watchdog exited %v after the renewal, within the %v lease", since, lease)
	}
	if got := killed(); !slices.Equal(got, []string{"sb-a", "sb-b"}) {
		t.Errorf("killed %v, want sb-a and sb-b", got)
	}
	// The node joined the fleet again.
	w.Renew(time.Now())
	if !running(w) {
		t.Fatal("no watchdog after a renewal")
	}
	if second := holderOf(t, o); second == first {
		t.Errorf("the watchdog after the renewal is the one that exited (%d)", first)
	}
	exitOf(t, w, "the new watchdog to fire")
	if got := killed(); !slices.Equal(got, []string{"sb-a", "sb-a", "sb-b", "sb-b"}) {
		t.Errorf("killed %v, want sb-a and sb-b twice", got)
	}
}

// TestStartReplacesTheWatchdog: a new daemon on a data directory (after a
// kill -9 of the last) stops the watchdog the last one left, and its own
// guards the same lease: the last daemon's renewal lapses as it would
// have.
func TestStartReplacesTheWatchdog(t *testing.T) {
	killed := recording(t)
	const lease = 1500 * time.Millisecond
	o := node(t, lease, "sb-a")
	old := start(t, o)
	oldPid := holderOf(t, o)
	sent := time.Now()
	old.Renew(sent)
	w := start(t, o)
	exitOf(t, old, "the old watchdog to be stopped")
	if pid := holderOf(t, o); pid == oldPid || !running(w) {
		t.Fatalf("the data directory's watchdog is %d (the old one %d), the new one running %v", pid, oldPid, running(w))
	}
	if got := killed(); len(got) != 0 {
		t.Fatalf("killed %v %v after a renewal of a %v lease", got, time.Since(sent), lease)
	}
	exitOf(t, w, "the new watchdog to fire on the old renewal")
	if since := time.Since(sent); since < lease {
		t.Errorf("fired %v after the renewal, within the %v lease", since, lease)
	}
	if got := killed(); !slices.Equal(got, []string{"sb-a"}) {
		t.Errorf("killed %v, want sb-a", got)
	}
}

// TestDaemonExitLeavesItArmed: a daemon that exits leaves its sandboxes
// running (the next daemon adopts them), so its watchdog stays and kills
// them when the lease lapses; one that never renewed leaves a watchdog
// with nothing to guard, which exits with it.
func TestDaemonExitLeavesItArmed(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want []string
	}{{"renew", []string{"sb-a"}}, {"start", nil}} {
		t.Run(tc.mode, func(t *testing.T) {
			killed := recording(t)
			o := node(t, 500*time.Millisecond, "sb-a")
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), nodeEnv+"="+tc.mode, dataEnv+"="+o.DataDir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the daemon: %v: %s", err, out)
			}
			wait.For(t, 10*time.Second, "the watchdog to exit", func() bool { return lockFree(t, o) })
			if got := killed(); !slices.Equal(got, tc.want) {
				t.Errorf("killed %v, want %v", got, tc.want)
			}
		})
	}
}

// testLogTo is a debug log on f, for the test binary in its helper roles.
func testLogTo(f *os.File) *slog.Logger {
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
