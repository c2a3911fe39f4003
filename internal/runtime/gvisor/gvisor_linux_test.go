//go:build linux

package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/cgroup"
	"warren/internal/mountinfo"
	"warren/internal/procid"
	"warren/internal/runtime"
	"warren/internal/runtime/gvisor/gvisorinit"
	"warren/internal/runtime/runtimetest"
	"warren/internal/wait"
)

// agentPath is the guest agent built once for this test binary.
var agentPath string

func TestMain(m *testing.M) { os.Exit(runtimetest.Main(m, &agentPath)) }

func TestParseVersion(t *testing.T) {
	for out, want := range map[string]int{
		"runsc version 0.0~20240729.0\nspec: 1.2.0\n": 20240729,
		"runsc version release-20250113.0\n":          20250113,
		"runsc version 0.0~20221219.0\n":              20221219,
		"something else":                              0,
	} {
		if got := parseVersion(out); got != want {
			t.Errorf("parseVersion(%q) = %d, want %d", out, got, want)
		}
	}
}

func TestContainerID(t *testing.T) {
	for name, want := range map[string]string{
		"sb-abc_sandbox:sb-abc.state": "sb-abc",
		"sb-abc_sandbox:sb-abc.lock":  "sb-abc",
		"runsc-sb-abc.sock":           "sb-abc",
		"runsc-sb-abc":                "",
		"something else":              "",
	} {
		if got := containerID(name); got != want {
			t.Errorf("containerID(%q) = %q, want %q", name, got, want)
		}
	}
}

// newRuntime makes a runtime over a directory of the test's, or skips.
func newRuntime(t testing.TB, dir string) *Runtime {
	t.Helper()
	return newRuntimeSpilling(t, dir, 0)
}

// newRuntimeSpilling is newRuntime whose paused sandboxes stay frozen for
// spillAfter (Options.SpillAfter).
func newRuntimeSpilling(t testing.TB, dir string, spillAfter time.Duration) *Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the gvisor runtime needs root")
	}
	var w io.Writer = io.Discard
	if os.Getenv("WARREN_TEST_LOG") != "" {
		w = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cg, err := cgroup.Detect(nil)
	if err != nil {
		t.Skipf("no usable cgroups: %v", err)
	}
	rt, err := New(log, cg, agentPath, Options{Dir: dir, SpillAfter: spillAfter})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Available(); err != nil {
		t.Skipf("gvisor runtime unavailable: %v", err)
	}
	return rt
}

// fixture is one sandbox's spec over a mini image.
func fixture(t testing.TB, rt *Runtime, n int) runtime.Spec {
	t.Helper()
	id := fmt.Sprintf("gvtest-%d-%d", os.Getpid(), n)
	dir := filepath.Join(t.TempDir(), id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.release(context.Background(), id, dir) })
	return runtime.Spec{
		ID: id, Disk: runtimetest.MiniImage(t, "/usr/bin/head", "/usr/bin/tail", "/usr/bin/mv"), Hostname: "box-" + id, Dir: dir,
		Limits: runtime.Limits{CPUs: 1, MemoryBytes: 128 << 20, Pids: 64},
	}
}

func start(t testing.TB, rt *Runtime, spec runtime.Spec) runtime.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := rt.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Stop(context.Background()) })
	if err := inst.Dial().WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return inst
}

// run runs sh -c script in inst and returns its stdout.
func run(t testing.TB, inst runtime.Instance, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	end, _, err := inst.Dial().Run(ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}}, &out, &errb)
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	if end.GetExitCode() != 0 {
		t.Fatalf("%s: exit %d: %s", script, end.GetExitCode(), errb.String())
	}
	return out.String()
}

// TestStartWritesReachDiskStopLeavesNothing: the agent answers as PID 1 of
// gVisor's kernel, writes reach the disk image's host mount, and Stop
// leaves no runsc container, cgroup, mount or file behind.
func TestStartWritesReachDiskStopLeavesNothing(t *testing.T) {
	rt := newRuntime(t, t.TempDir())
	spec := fixture(t, rt, 1)
	inst := start(t, rt, spec)
	if got := run(t, inst, "hostname; cat /proc/cmdline"); !strings.HasPrefix(got, spec.Hostname+"\n") || !strings.Contains(got, "gvisor") {
		t.Errorf("hostname and kernel: %q", got)
	}
	run(t, inst, "echo written > /root/note; echo written > /tmp/note")
	for _, f := range []string{"root/note", "tmp/note"} {
		b, err := os.ReadFile(filepath.Join(spec.Dir, rootfsDir, f))
		if err != nil || string(b) != "written\n" {
			t.Errorf("the write of /%s on the host's mount of the disk: %q %v", f, b, err)
		}
	}
	if err := inst.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	if _, err := rt.cgroups.Open(spec.ID); err == nil {
		t.Error("the sandbox's cgroup is left")
	}
	if _, err := rt.sandboxPID(context.Background(), spec.ID); err == nil {
		t.Error("runsc still knows the sandbox")
	}
	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if strings.HasPrefix(m.Point, spec.Dir) {
			t.Errorf("mount left: %s", m.Point)
		}
	}
	if entries, _ := os.ReadDir(spec.Dir); len(entries) != 0 {
		t.Errorf("files left in the sandbox's directory: %v", entries)
	}
}

// TestAdoptAfterRestart: a new runtime (a new daemon) adopts a running
// sandbox from its state, and the agent dials its new socket.
func TestAdoptAfterRestart(t *testing.T) {
	dir := t.TempDir()
	rt := newRuntime(t, dir)
	spec := fixture(t, rt, 2)
	inst := start(t, rt, spec)
	run(t, inst, "echo before > /tmp/mark")
	state := inst.State()
	inst.(*instance).agent.release(0) // the old daemon's socket goes with it

	rt2 := newRuntime(t, dir)
	adopted, err := rt2.Adopt(context.Background(), spec, state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adopted.Stop(context.Background()) })
	if got := run(t, adopted, "cat /tmp/mark"); got != "before\n" {
		t.Errorf("adopted sandbox: %q", got)
	}
}

// TestLimits: the pids limit holds inside gVisor, and a process that
// outgrows the memory limit is killed while the agent (and the sandbox)
// lives on.
func TestLimits(t *testing.T) {
	rt := newRuntime(t, t.TempDir())
	spec := fixture(t, rt, 3)
	inst := start(t, rt, spec)
	out := run(t, inst, `n=0; for i in $(seq 200); do sleep 5 & n=$((n+1)); done 2>/dev/null; echo $n; kill $(jobs -p) 2>/dev/null; true`)
	if n, _ := strconv.Atoi(strings.TrimSpace(out)); n > int(spec.Limits.Pids) {
		t.Errorf("%s processes started under a limit of %d", strings.TrimSpace(out), spec.Limits.Pids)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// tail keeps the last lines, and 512 MiB of zeros are one line: the
	// sandbox has 128 MiB.
	hog := `head -c 536870912 /dev/zero | tail >/dev/null`
	end, _, err := inst.Dial().Run(ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", hog}}}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if end.GetExitCode() == 0 {
		t.Errorf("a 512 MiB process in a 128 MiB sandbox: %v, want it killed", end)
	}
	if got := run(t, inst, "echo alive"); got != "alive\n" {
		t.Errorf("after the hog: %q", got)
	}
}

// TestPauseResume: a paused sandbox's processes stop where they are and go
// on from there at the resume: frozen (its Sentry alive) until the spill,
// then saved (no process), and adopted by a new daemon either way.
func TestPauseResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spill time.Duration
	}{
		{"saved at once", 0},
		{"frozen", time.Hour},
		{"spilled", 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			rt := newRuntimeSpilling(t, dir, tc.spill)
			spec := fixture(t, rt, 4)
			inst := start(t, rt, spec)
			// The counter renames each value into place, so a read never
			// finds the file truncated and empty.
			run(t, inst, `(i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.01; done) >/dev/null 2>&1 &`)
			count := func(inst runtime.Instance) int {
				n, _ := strconv.Atoi(strings.TrimSpace(run(t, inst, "cat /tmp/count 2>/dev/null; true")))
				return n
			}
			wait.For(t, 10*time.Second, "the counter counting", func() bool { return count(inst) > 5 })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var running state
			json.Unmarshal(inst.State(), &running)
			if err := inst.(runtime.Pauser).Pause(ctx); err != nil {
				t.Fatal(err)
			}
			// Its image is saved at once, frozen or not.
			if img := inst.(runtime.Pauser).Image(); img == "" {
				t.Error("paused without an image")
			} else if _, err := os.Stat(filepath.Join(img, "checkpoint.img")); err != nil {
				t.Errorf("its image: %v", err)
			}
			paused := func() state {
				var st state
				if err := json.Unmarshal(inst.State(), &st); err != nil || !st.Paused {
					t.Fatalf("paused state: %+v %v", st, err)
				}
				return st
			}
			saved := func() bool { st := paused(); return !st.Frozen && st.PID == 0 }
			switch tc.spill {
			case 0:
				if !saved() {
					t.Errorf("paused state: %+v, want saved", paused())
				}
			case time.Hour:
				if st := paused(); !st.Frozen || st.PID != running.PID || !procid.Is(running.PID, running.StartTime) {
					t.Errorf("frozen state: %+v, want its Sentry (pid %d) alive", st, running.PID)
				}
				// The counter stands still (the host sees the file).
				file := filepath.Join(spec.Dir, rootfsDir, "tmp", "count")
				before, _ := os.ReadFile(file)
				time.Sleep(200 * time.Millisecond)
				if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
					t.Errorf("frozen, the counter went from %q to %q", before, after)
				}
			default:
				wait.For(t, 30*time.Second, "the memory saved", saved)
			}
			if saved() {
				// Gone, or a zombie the host's init has yet to reap.
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", running.PID)); err == nil && procid.Is(running.PID, running.StartTime) && !strings.Contains(string(b), ") Z ") {
					t.Errorf("the saved sandbox's Sentry still runs: %s", b)
				}
			}
			// A new daemon adopts the paused sandbox and resumes it.
			state := inst.State()
			old := inst.(*instance)
			old.opMu.Lock()
			old.agent.release(0)
			if old.spill != nil {
				old.spill.Stop()
			}
			old.opMu.Unlock()
			rt2 := newRuntimeSpilling(t, dir, tc.spill)
			adopted, err := rt2.Adopt(ctx, spec, state)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { adopted.Stop(context.Background()) })
			if err := adopted.(runtime.Pauser).Resume(ctx); err != nil {
				t.Fatal(err)
			}
			before := count(adopted)
			wait.For(t, 10*time.Second, "the counter counting on", func() bool { return count(adopted) > before })
			if before < 5 {
				t.Errorf("the counter started again: %d", before)
			}
		})
	}
}

// BenchmarkPauseResume pauses and resumes a sandbox whose process holds
// 256 MiB, frozen (resumed before its memory is saved) and saved:
// pause-ms and resume-ms are the medians of each over b.N pairs.
func BenchmarkPauseResume(b *testing.B) {
	for _, bc := range []struct {
		name  string
		spill time.Duration
	}{{"frozen", time.Hour}, {"saved", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			rt := newRuntimeSpilling(b, b.TempDir(), bc.spill)
			spec := fixture(b, rt, 5)
			spec.Limits.MemoryBytes = 512 << 20
			inst := start(b, rt, spec)
			run(b, inst, `(head -c 268435456 /dev/zero | tail; sleep 3600) >/dev/null 2>&1 &`)
			wait.For(b, 30*time.Second, "256 MiB held", func() bool {
				st, err := inst.(*instance).r.cgroups.Open(spec.ID)
				if err != nil {
					return false
				}
				s, err := st.Stats()
				return err == nil && s.MemoryBytes > 256<<20
			})
			p := inst.(runtime.Pauser)
			ctx := context.Background()
			var pauses, resumes []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := p.Pause(ctx); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := p.Resume(ctx); err != nil {
					b.Fatal(err)
				}
				pauses, resumes = append(pauses, t1.Sub(t0)), append(resumes, time.Since(t1))
			}
			b.ReportMetric(float64(median(pauses))/1e6, "pause-ms")
			b.ReportMetric(float64(median(resumes))/1e6, "resume-ms")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// TestMetrics: the agent's figures are the sandbox's, read from gVisor's
// own kernel.
func TestMetrics(t *testing.T) {
	rt := newRuntime(t, t.TempDir())
	spec := fixture(t, rt, 6)
	inst := start(t, rt, spec)
	m, err := inst.Dial().Control.Metrics(context.Background(), connect.NewRequest(&controlpb.MetricsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Msg; got.GetMemTotalBytes() == 0 || got.GetMemTotalBytes() > uint64(spec.Limits.MemoryBytes)+(runtime.AgentMemoryMB+runtime.SentryMemoryMB)<<20 ||
		got.GetPids() == 0 || got.GetDiskTotalBytes() == 0 {
		t.Errorf("metrics: %+v", got)
	}
}

// TestChannelTakesOnlyTheAgent: a connection to the agent's channel that
// does not send the agent's token first is closed, and the agent's calls
// go on; the token's file is gone once the agent has connected.
func TestChannelTakesOnlyTheAgent(t *testing.T) {
	rt := newRuntime(t, t.TempDir())
	spec := fixture(t, rt, 7)
	inst := start(t, rt, spec)
	if _, err := os.Stat(filepath.Join(spec.Dir, chanDir, gvisorinit.TokenFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the token's file after the agent connected: %v", err)
	}
	// The agent's connection is taken; drop it so that the runtime accepts
	// again, with an impostor queued first.
	impostor, err := net.Dial("unix", inst.AgentSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer impostor.Close()
	if _, err := impostor.Write(bytes.Repeat([]byte("x"), 64)); err != nil {
		t.Fatal(err)
	}
	inst.(*instance).agent.mu.Lock()
	inst.(*instance).agent.cur.Close()
	inst.(*instance).agent.mu.Unlock()
	if got := run(t, inst, "echo still the agent"); got != "still the agent\n" {
		t.Errorf("after an impostor: %q", got)
	}
	impostor.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := impostor.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Errorf("the impostor read %d bytes, %v; want its connection closed", n, err)
	}
}
