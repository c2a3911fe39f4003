//go:build linux

package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/internal/cgroup"
	"warren/internal/runtime"
	"warren/internal/runtime/vm/guest"
	"warren/internal/runtime/vm/vminit"
	"warren/internal/vmm"
	"warren/internal/vmm/accel"
)

func TestCmdline(t *testing.T) {
	for _, ws := range []bool{false, true} {
		got := cmdline("sb-abc", ws, !ws)
		for _, want := range []string{vminit.ParamVM + "=1", vminit.ParamHostname + "=sb-abc", "console=ttyS0"} {
			if !strings.Contains(got, want) {
				t.Errorf("cmdline %q lacks %q", got, want)
			}
		}
		if strings.Contains(got, vminit.ParamWorkspace+"=1") != ws {
			t.Errorf("cmdline %q: workspace parameter, want it only with a workspace (%v)", got, ws)
		}
		if strings.Contains(got, vminit.ParamNetwork+"=1") != !ws {
			t.Errorf("cmdline %q: network parameter, want it only with a network (%v)", got, !ws)
		}
	}
}

// TestConfig: Start and Adopt build the machine from the spec alike; a
// workspace is the second disk and the guest is told to mount it.
func TestConfig(t *testing.T) {
	r := &Runtime{kernel: guest.Kernel{Vmlinuz: "/k/vmlinuz"}, initrd: "/r/initramfs", accel: accel.Accel{Name: accel.TCG}}
	spec := runtime.Spec{ID: "sb-1", Disk: "/d/sb-1.img", Workspace: "/d/sb-1.ws.img", Hostname: "sb-1", Dir: "/s/sb-1",
		Limits: runtime.Limits{CPUs: 1.5, MemoryBytes: 256 << 20}}
	cfg := r.config(spec)
	want := vmm.Config{ID: "sb-1", Kernel: "/k/vmlinuz", Initrd: "/r/initramfs", Cmdline: cmdline("sb-1", true, false),
		Disk: "/d/sb-1.img", Workspace: "/d/sb-1.ws.img", MemoryMiB: 256, VCPUs: 2, Accel: accel.TCG,
		AgentSocket: "/s/sb-1/agent.sock", ConsoleLog: "/s/sb-1/console.log", RNG: true, WorkDir: "/s/sb-1/vmm"}
	if cfg != want {
		t.Errorf("config = %+v\nwant %+v", cfg, want)
	}
	spec.Workspace, spec.Limits = "", runtime.Limits{}
	if cfg := r.config(spec); cfg.Workspace != "" || strings.Contains(cfg.Cmdline, vminit.ParamWorkspace) || cfg.MemoryMiB != DefaultMemoryMiB || cfg.VCPUs != 1 {
		t.Errorf("config without workspace or limits = %+v", cfg)
	}
}

// TestAdoptPaused: a paused sandbox has no QEMU: it is adopted paused, as
// long as its memory file is there, and reports itself paused again;
// without the file it is gone and its directory removed.
func TestAdoptPaused(t *testing.T) {
	r := &Runtime{log: slog.New(slog.DiscardHandler), cgroups: &cgroup.Hierarchy{}, accel: accel.Accel{Name: accel.TCG}}
	raw := []byte(`{"pid":0,"start_time":0,"uid":0,"socket":"x","accel":"tcg","paused":true}`)
	dir := filepath.Join(t.TempDir(), "sb-p")
	os.Mkdir(dir, 0o700)
	spec := runtime.Spec{ID: "sb-p", Dir: dir, Hostname: "sb-p"}

	os.WriteFile(filepath.Join(dir, memoryFile), []byte("memory"), 0o600)
	inst, err := r.Adopt(t.Context(), spec, raw)
	if err != nil {
		t.Fatalf("Adopt of a paused sandbox: %v", err)
	}
	var st state
	if err := json.Unmarshal(inst.State(), &st); err != nil || !st.Paused || st.PID != 0 {
		t.Errorf("adopted paused sandbox's state %s (%v), want paused without a pid", inst.State(), err)
	}
	select {
	case <-inst.Done():
		t.Error("a paused sandbox is done")
	default:
	}
	if err := inst.Stop(t.Context()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, memoryFile)); !os.IsNotExist(err) {
		t.Errorf("memory file after Stop: %v, want it removed", err)
	}

	if _, err := r.Adopt(t.Context(), spec, raw); !errors.Is(err, runtime.ErrGone) {
		t.Errorf("Adopt of a paused sandbox without its memory = %v, want ErrGone", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("dir of a gone sandbox: %v, want it removed", err)
	}
}

func TestIsolationIsHonest(t *testing.T) {
	for _, c := range []struct{ accel, want string }{
		{accel.KVM, "vm (QEMU, kvm)"},
		{accel.TCG, "software emulation"},
	} {
		r := &Runtime{accel: accel.Accel{Name: c.accel}}
		if got := r.Isolation(); !strings.Contains(got, c.want) {
			t.Errorf("accel %s: isolation %q, want it to say %q", c.accel, got, c.want)
		}
	}
}

// TestUnavailableWithoutKernel: a node without a guest kernel still gets a
// runtime, which says why it cannot run and refuses to start.
func TestUnavailableWithoutKernel(t *testing.T) {
	r, err := New(slog.New(slog.DiscardHandler), &cgroup.Hierarchy{}, "/nonexistent", Options{Dir: t.TempDir(), KernelDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Available() == nil {
		t.Fatal("available without a guest kernel")
	}
	if _, err := r.Start(t.Context(), runtime.Spec{ID: "x"}); err == nil {
		t.Error("started without a guest kernel")
	}
}

// TestAdoptPausedMidResume: a paused sandbox whose cgroup exists was being
// resumed when the daemon died (a QEMU may have run the guest on from its
// memory file): it is gone, and what ran in the cgroup is killed.
func TestAdoptPausedMidResume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups")
	}
	h, err := cgroup.Detect(nil)
	if err != nil {
		t.Skipf("needs cgroups: %v", err)
	}
	r := &Runtime{log: slog.New(slog.DiscardHandler), cgroups: h, accel: accel.Accel{Name: accel.TCG}}
	id := fmt.Sprintf("vmtest-resume-%d", os.Getpid())
	g, err := h.Create(id, cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Destroy(context.Background()) })
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { sleep.Wait(); close(exited) }()
	if err := g.AddProc(sleep.Process.Pid); err != nil {
		sleep.Process.Kill()
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), id)
	os.Mkdir(dir, 0o700)
	os.WriteFile(filepath.Join(dir, memoryFile), []byte("memory"), 0o600)
	raw := []byte(`{"socket":"x","accel":"tcg","paused":true}`)
	if _, err := r.Adopt(t.Context(), runtime.Spec{ID: id, Dir: dir}, raw); !errors.Is(err, runtime.ErrGone) {
		t.Errorf("Adopt of a paused sandbox with a live cgroup = %v, want ErrGone", err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the process in the sandbox's cgroup still runs")
	}
	if _, err := h.Open(id); !errors.Is(err, cgroup.ErrNotFound) {
		t.Errorf("cgroup after Adopt: %v, want it removed", err)
	}
}
