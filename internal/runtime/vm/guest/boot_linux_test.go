//go:build linux

package guest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agentconn"
	"warren/internal/runtime/vm/vminit"
	"warren/internal/vmport"
)

// templateImage is the default template's root disk that the e2e suite
// builds (WARREN_TEST_TEMPLATE overrides). The test boots a clone of it.
func templateImage() string {
	if p := os.Getenv("WARREN_TEST_TEMPLATE"); p != "" {
		return p
	}
	return "/var/cache/warren-test/e2e-data/disks/templates/default.img"
}

// TestBootAgentInQEMU boots a real microVM under QEMU (TCG, q35: see
// DESIGN.md §5, hardware KVM is not usable here) from the extracted guest
// kernel, an initramfs built by BuildInitramfs and a clone of the template
// disk, and talks to the guest agent, PID 1 of the guest, through its
// virtio-serial port bridged to a unix socket.
func TestBootAgentInQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM (seconds under TCG)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the template image is root's")
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("needs qemu-system-x86_64 (Debian package qemu-system-x86; scripts/deps.sh installs it)")
	}
	k := realKernel(t)
	if _, err := os.Stat(templateImage()); err != nil {
		t.Skipf("needs the default template image (built by the e2e suite): %v", err)
	}
	dir := t.TempDir()

	agentBin := filepath.Join(dir, "warren-agent")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=vmtest", "-o", agentBin, "warren/cmd/warren-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initramfs")
	f, err := os.Create(initrd)
	if err != nil {
		t.Fatal(err)
	}
	if err := BuildInitramfs(f, agentBin, k); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// A clone: the template must never be written. cp reflinks when it
	// can and otherwise copies only the image's data extents.
	disk := filepath.Join(dir, "root.img")
	if out, err := exec.Command("cp", "--reflink=auto", "--sparse=always", templateImage(), disk).CombinedOutput(); err != nil {
		t.Fatalf("clone template: %v\n%s", err, out)
	}

	sock := filepath.Join(dir, "agent.sock")
	console := filepath.Join(dir, "console.log")
	cmd := exec.Command(qemu,
		"-M", "q35", "-accel", "tcg", "-m", "512", "-smp", "1",
		"-nographic", "-nodefaults", "-no-reboot",
		"-kernel", k.Vmlinuz, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 "+vminit.ParamVM+"=1 "+vminit.ParamHostname+"=vmtest",
		"-drive", "file="+disk+",if=none,format=raw,id=root",
		"-device", "virtio-blk-pci,drive=root",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=agent,path="+sock+",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name="+vmport.Name,
		"-device", "virtio-rng-pci",
		"-serial", "file:"+console,
	)
	var qemuOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &qemuOut, &qemuOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("qemu output:\n%s", qemuOut.String())
			t.Logf("console.log (tail):\n%s", tail(console, 60))
		}
	})

	// Ready: the agent answers through the port. QEMU exiting ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitCtx, stopWait := context.WithCancel(ctx)
	go func() {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			stopWait()
		case <-waitCtx.Done():
		}
	}()
	conn := agentconn.DialVMPort(sock)
	err = conn.WaitReady(waitCtx)
	stopWait()
	if err != nil {
		t.Fatalf("agent not ready after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	ready := time.Since(start)
	info, err := conn.Control.Info(ctx, connect.NewRequest(&controlpb.InfoRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot to agent ready: %v (QEMU start to first answer; guest kernel %s, agent up %d ms)",
		ready.Round(time.Millisecond), info.Msg.GetKernel(), info.Msg.GetUptimeMs())
	for _, l := range strings.Split(tail(console, 1000), "\n") {
		if strings.Contains(l, "Unpacking initramfs") || strings.Contains(l, "Freeing initrd") || strings.Contains(l, "Run /init") || strings.Contains(l, "vm set up") {
			t.Logf("console: %s", l)
		}
	}
	if info.Msg.GetPid() != 1 || info.Msg.GetHostname() != "vmtest" {
		t.Errorf("agent: pid %d hostname %q, want PID 1 of a guest named vmtest", info.Msg.GetPid(), info.Msg.GetHostname())
	}

	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr strings.Builder
		end, _, err := conn.Run(ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: args[0], Args: args[1:]}}, &stdout, &stderr)
		if err != nil || end.GetExitCode() != 0 {
			t.Fatalf("%v: %v %v, stderr %q", args, end, err, stderr.String())
		}
		return stdout.String()
	}
	var host unix.Utsname
	unix.Uname(&host)
	if got := strings.TrimSpace(run("uname", "-r")); got != k.Version || got == unix.ByteSliceToString(host.Release[:]) {
		t.Errorf("uname -r in the guest: %q, want the guest kernel %s (the host runs %s)", got, k.Version, unix.ByteSliceToString(host.Release[:]))
	}
	if got := run("cat", "/proc/1/cmdline"); got != "/init\x00" {
		t.Errorf("/proc/1/cmdline: %q, want the initramfs's /init", got)
	}
	if got := strings.TrimSpace(run("cat", "/proc/1/comm")); got != "warren-agent" {
		t.Errorf("/proc/1/comm: %q, want warren-agent", got)
	}
	if got := run("findmnt", "-n", "-o", "SOURCE,FSTYPE", "/"); strings.Fields(got)[0] != vminit.RootDevice || strings.Fields(got)[1] != "ext4" {
		t.Errorf("root mount: %q, want %s ext4", got, vminit.RootDevice)
	}
	if got := strings.TrimSpace(run("sh", "-c", "cat /sys/class/virtio-ports/*/name")); got != vmport.Name {
		t.Errorf("virtio-serial ports: %q, want %s", got, vmport.Name)
	}

	want := []byte("written through the virtio-serial port\n")
	if _, err := conn.WriteFile(ctx, "/root/hello.txt", 0o644, "", bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	r, _, err := conn.ReadFile(ctx, "/root/hello.txt", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("read back %q, %v; want %q", got, err, want)
	}

	// The host reconnects: at once (the guest's session may not see the
	// host go; the port's handshake sorts that out), and after a pause, as
	// a restarted daemon does (the guest sees the host go and waits).
	for _, pause := range []time.Duration{0, time.Second} {
		conn.Close()
		time.Sleep(pause) // the daemon restarting, not a wait for a condition
		conn = agentconn.DialVMPort(sock)
		reconnect := time.Now()
		if err := conn.WaitReady(ctx); err != nil {
			t.Fatalf("agent not ready again after the host reconnected (pause %v): %v", pause, err)
		}
		t.Logf("reconnect after a %v pause: %v", pause, time.Since(reconnect).Round(time.Millisecond))
		if got := strings.TrimSpace(run("cat", "/root/hello.txt")); got != strings.TrimSpace(string(want)) {
			t.Errorf("after reconnect: %q", got)
		}
	}
	defer func() { conn.Close() }()

	// Shutdown powers the guest off, which ends QEMU.
	if _, err := conn.Control.Shutdown(ctx, connect.NewRequest(&controlpb.ShutdownRequest{GraceMs: 1000})); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("qemu: %v", err)
		}
		exited <- err
	case <-time.After(30 * time.Second):
		t.Fatal("qemu still running 30 s after the agent's shutdown")
	}
	if c := tail(console, 200); !strings.Contains(c, "powering off") {
		t.Errorf("console does not show the power-off")
	}
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
