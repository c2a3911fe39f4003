//go:build linux

package inproc

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/runtime"
)

// TestConformance is the unit-level subset of the runtime conformance
// suite (e2e TestConformance), which runs on the daemon's runtimes: start
// and the agent answering, exec, files, pause and resume, adoption by a
// restarted manager, and teardown. The rest does not apply to a runtime
// with no isolation: it has no limits, no network of its own, no disk to
// snapshot, and lives in the test's process (there is no daemon to kill).
// Unlike a VM's, its pause does not keep processes: a new agent serves
// after Resume.
func TestConformance(t *testing.T) {
	r := New("container", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := runtime.Spec{ID: "sb-conf"} // what Adopt reads of it
	in := start(t, r, spec.ID)
	conn := in.Dial()
	defer conn.Close()
	if err := conn.WaitReady(ctx); err != nil {
		t.Fatalf("agent: %v", err)
	}

	t.Run("exec", func(t *testing.T) {
		var out, errOut strings.Builder
		end, _, err := conn.Run(ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{
			Cmd: "/bin/sh", Args: []string{"-c", "echo out; echo err >&2; exit 3"},
		}}, &out, &errOut)
		if err != nil || end.GetExitCode() != 3 || out.String() != "out\n" || errOut.String() != "err\n" {
			t.Errorf("run: %v, exit %d, stdout %q, stderr %q; want exit 3, out, err", err, end.GetExitCode(), out.String(), errOut.String())
		}
	})
	t.Run("files", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		data := strings.Repeat("conformance\n", 1<<16)
		if _, err := conn.WriteFile(ctx, path, 0o600, "", strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		rc, n, err := conn.ReadFile(ctx, path, "")
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		got, err := io.ReadAll(rc)
		if err != nil || string(got) != data || n != int64(len(data)) {
			t.Errorf("read back %d bytes (size %d, %v), want the %d written", len(got), n, err, len(data))
		}
	})
	t.Run("pause and resume", func(t *testing.T) {
		p := in.(runtime.Pauser)
		if err := p.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		short, stop := context.WithTimeout(ctx, time.Second)
		_, err := conn.Control.Info(short, connect.NewRequest(&controlpb.InfoRequest{}))
		stop()
		if err == nil {
			t.Error("the agent of a paused sandbox answers")
		}
		select {
		case <-in.Done():
			t.Fatal("Done fired at a pause")
		default:
		}
		if err := p.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		if err := conn.WaitReady(ctx); err != nil {
			t.Errorf("agent after resume: %v", err)
		}
	})
	t.Run("adoption", func(t *testing.T) {
		if got, err := r.Adopt(ctx, spec, in.State()); err != nil || got != in {
			t.Errorf("adopt of a running sandbox: %v, %v; want the same instance", got, err)
		}
	})
	t.Run("teardown leaves nothing", func(t *testing.T) {
		if err := in.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-in.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed by Stop")
		}
		if _, err := os.Stat(in.AgentSocket()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("agent socket after Stop: %v, want it gone", err)
		}
		if r.Live(spec.ID) != nil {
			t.Error("the runtime still lists the stopped sandbox")
		}
		if _, err := r.Adopt(ctx, spec, in.State()); !errors.Is(err, runtime.ErrGone) {
			t.Errorf("adopt of a stopped sandbox: %v, want ErrGone", err)
		}
		if err := in.Stop(ctx); err != nil {
			t.Errorf("a second Stop: %v, want none (idempotent)", err)
		}
	})
}
