//go:build linux

package inproc

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/runtime"
)

func start(t *testing.T, r *Runtime, id string) runtime.Instance {
	t.Helper()
	in, err := r.Start(context.Background(), runtime.Spec{ID: id, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Stop(context.Background()) })
	return in
}

func TestLifecycle(t *testing.T) {
	r := New("container", nil)
	in := start(t, r, "sb-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := in.Dial()
	defer conn.Close()
	if err := conn.WaitReady(ctx); err != nil {
		t.Fatalf("agent: %v", err)
	}
	var out strings.Builder
	if _, _, err := conn.Run(ctx, echo("hi"), &out, nil); err != nil || out.String() != "hi\n" {
		t.Errorf("run: %q %v", out.String(), err)
	}
	// A restarted daemon adopts it from its state; a crashed one is gone.
	if got, err := r.Adopt(ctx, runtime.Spec{ID: "sb-1"}, in.State()); err != nil || got != in {
		t.Errorf("adopt: %v %v", got, err)
	}
	r.Live("sb-1").Crash()
	select {
	case <-in.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed by a crash")
	}
	if _, err := r.Adopt(ctx, runtime.Spec{ID: "sb-1"}, in.State()); !errors.Is(err, runtime.ErrGone) {
		t.Errorf("adopt of a crashed sandbox: %v, want ErrGone", err)
	}
	if r.Started() != 1 {
		t.Errorf("started %d", r.Started())
	}
}

func TestGateHoldsStart(t *testing.T) {
	r := New("container", nil)
	r.Gate = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := r.Start(ctx, runtime.Spec{ID: "sb-2", Dir: t.TempDir()}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("start behind a closed gate: %v", err)
	}
	go func() { r.Gate <- struct{}{} }()
	start(t, r, "sb-3")
}

func TestSweepStopsTheUnkept(t *testing.T) {
	r := New("container", nil)
	a, b := start(t, r, "sb-a"), start(t, r, "sb-b")
	if err := r.Sweep(context.Background(), map[string]bool{"sb-a": true, "sb-b": true}, map[string]bool{"sb-b": true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	default:
		t.Error("an unkept sandbox still runs after Sweep")
	}
	select {
	case <-b.Done():
		t.Error("a kept sandbox was stopped by Sweep")
	default:
	}
}

func echo(s string) *processpb.StartRequest {
	return &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/echo", Args: []string{s}}}
}

// TestInitKeepsTheHostsHostname is the bug where every sandbox the manager
// started in a root test renamed the host after itself (and, not root,
// failed to start).
func TestInitKeepsTheHostsHostname(t *testing.T) {
	before, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	in := start(t, New("container", nil), "sb-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := in.Dial()
	defer conn.Close()
	_, err = conn.Control.Init(ctx, connect.NewRequest(&controlpb.InitRequest{SandboxId: "sb-1", Hostname: "sb-1"}))
	if after, _ := os.Hostname(); err != nil || after != before {
		t.Errorf("Init with a hostname: %v, the host's hostname %q, want it kept (%q)", err, after, before)
		if after != before {
			unix.Sethostname([]byte(before))
		}
	}
}
