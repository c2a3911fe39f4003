//go:build linux

package leasewatch

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"warren/internal/detached"
	"warren/internal/wait"
)

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// recorder is a Killer that kills nothing: it records the IDs it is
// given, and fails the first Kill of each ID in failOnce.
type recorder struct {
	mu       sync.Mutex // guards the fields below
	killed   []string
	failOnce map[string]bool
	// then, when set, runs after the first Kill (the test's own sandbox
	// appearing while the watchdog kills).
	then func()
}

var _ Killer = (*recorder)(nil)

func (r *recorder) Kill(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.then != nil {
		r.then()
		r.then = nil
	}
	if r.failOnce[id] {
		delete(r.failOnce, id)
		return errors.New("not this time")
	}
	r.killed = append(r.killed, id)
	return nil
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.killed))
}

// node is a data directory with sandboxes ids in its state directory.
func node(t *testing.T, lease time.Duration, ids ...string) Options {
	t.Helper()
	dir := t.TempDir()
	o := Options{DataDir: dir, StateDir: filepath.Join(dir, "sandboxes"), Lease: lease, Log: testLog(t)}
	for _, id := range ids {
		if err := os.MkdirAll(filepath.Join(o.StateDir, id), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// watchdog is RunWatchdog in the test's process, watching once it
// returns; its answer comes on the channel. The test ends only after it
// returned.
func watchdog(t *testing.T, o Options, k Killer) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- RunWatchdog(ctx, o, k, func() { close(ready) }) }()
	out := make(chan error, 1)
	t.Cleanup(func() {
		cancel()
		<-out
	})
	go func() {
		err := <-done
		out <- err
		close(out)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("RunWatchdog: %v", err)
	}
	return out
}

// TestFiresWhenTheLeaseLapses: not before the lease is over, and then
// every sandbox of the state directory, once, and the watchdog exits.
func TestFiresWhenTheLeaseLapses(t *testing.T) {
	const lease = 600 * time.Millisecond
	o := node(t, lease, "sb-a", "sb-b")
	sent := time.Now()
	newTestWatch(t, o.DataDir).Renew(sent)
	k := &recorder{}
	done := watchdog(t, o, k)
	select {
	case err := <-done:
		t.Fatalf("the watchdog returned %v while the lease ran", err)
	case <-time.After(lease / 2):
	}
	if ids := k.ids(); len(ids) != 0 {
		t.Fatalf("killed %v %v after a renewal of a %v lease", ids, time.Since(sent), lease)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunWatchdog: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not act on the lapsed lease")
	}
	if since := time.Since(sent); since < lease {
		t.Errorf("fired %v after the renewal, before the %v lease was over", since, lease)
	}
	if ids := k.ids(); !slices.Equal(ids, []string{"sb-a", "sb-b"}) {
		t.Errorf("killed %v, want sb-a and sb-b", ids)
	}
}

// TestRenewalsKeepItArmed: renewed in time, the watchdog kills nothing;
// once the renewals stop, it fires.
func TestRenewalsKeepItArmed(t *testing.T) {
	const lease = 500 * time.Millisecond
	o := node(t, lease, "sb-a")
	w := newTestWatch(t, o.DataDir)
	w.Renew(time.Now())
	k := &recorder{}
	done := watchdog(t, o, k)
	var last time.Time
	for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 10) {
		last = time.Now()
		w.Renew(last)
	}
	select {
	case err := <-done:
		t.Fatalf("the watchdog returned %v while renewed (killed %v)", err, k.ids())
	default:
	}
	if err := <-done; err != nil {
		t.Fatalf("RunWatchdog: %v", err)
	}
	if since := time.Since(last); since < lease {
		t.Errorf("fired %v after the last renewal, within the %v lease", since, lease)
	}
	if ids := k.ids(); !slices.Equal(ids, []string{"sb-a"}) {
		t.Errorf("killed %v, want sb-a", ids)
	}
}

// TestNoLeaseNoKill: without a renewal of this boot (none yet, or one
// written before the host rebooted) nothing is killed; then the data
// directory's removal ends the watchdog.
func TestNoLeaseNoKill(t *testing.T) {
	for _, name := range []string{"none", "another boot"} {
		t.Run(name, func(t *testing.T) {
			const lease = 200 * time.Millisecond
			o := node(t, lease, "sb-a")
			if name == "another boot" {
				r := renewal{boot: "00000000-0000-0000-0000-000000000000", wall: time.Now()}
				if err := os.WriteFile(filepath.Join(o.DataDir, leaseFile), r.encode(), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			k := &recorder{}
			done := watchdog(t, o, k)
			time.Sleep(4 * lease)
			if ids := k.ids(); len(ids) != 0 {
				t.Fatalf("killed %v with no lease to guard", ids)
			}
			if err := os.RemoveAll(o.DataDir); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("RunWatchdog: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the watchdog outlived its data directory")
			}
		})
	}
}

// TestDataDirRemoved: a watchdog whose data directory is removed exits
// without killing, though its lease lapses meanwhile.
func TestDataDirRemoved(t *testing.T) {
	const lease = 300 * time.Millisecond
	o := node(t, lease, "sb-a")
	newTestWatch(t, o.DataDir).Renew(time.Now())
	k := &recorder{}
	done := watchdog(t, o, k)
	if err := os.RemoveAll(o.DataDir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunWatchdog: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog outlived its data directory")
	}
	if ids := k.ids(); len(ids) != 0 {
		t.Errorf("killed %v after the data directory was removed", ids)
	}
}

// TestOneWatchdogPerDataDir: a second watchdog on a data directory is
// refused while the first runs.
func TestOneWatchdogPerDataDir(t *testing.T) {
	o := node(t, time.Minute)
	watchdog(t, o, &recorder{})
	err := RunWatchdog(context.Background(), o, &recorder{}, nil)
	if !errors.Is(err, ErrRunning) {
		t.Errorf("a second RunWatchdog on the data directory: %v, want ErrRunning", err)
	}
}

// TestKillsUntilNoneIsLeft: a sandbox whose kill fails is tried again,
// and one that appears while the watchdog kills is killed too.
func TestKillsUntilNoneIsLeft(t *testing.T) {
	const lease = 100 * time.Millisecond
	o := node(t, lease, "sb-a", "sb-b")
	newTestWatch(t, o.DataDir).Renew(time.Now())
	k := &recorder{failOnce: map[string]bool{"sb-a": true}, then: func() {
		if err := os.Mkdir(filepath.Join(o.StateDir, "sb-c"), 0o700); err != nil {
			t.Error(err)
		}
	}}
	done := watchdog(t, o, k)
	if err := <-done; err != nil {
		t.Fatalf("RunWatchdog: %v", err)
	}
	if ids := k.ids(); !slices.Equal(ids, []string{"sb-a", "sb-b", "sb-c"}) {
		t.Errorf("killed %v, want sb-a (at its second try), sb-b and sb-c", ids)
	}
}

// lockFree reports whether no watchdog holds o's data directory.
func lockFree(t *testing.T, o Options) bool {
	t.Helper()
	f, err := lockDataDir(o.DataDir)
	if errors.Is(err, ErrRunning) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return true
}

// holderOf is the pid of the watchdog holding o's data directory.
func holderOf(t *testing.T, o Options) int {
	t.Helper()
	f, err := os.Open(filepath.Join(o.DataDir, lockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pid int
	wait.For(t, 5*time.Second, "the watchdog to record itself in its lock", func() bool {
		pid, _, err = detached.Holder(f)
		return err == nil
	})
	return pid
}
