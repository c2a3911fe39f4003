//go:build linux

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warren/api"
)

// The vm runtime's part of the suite: few tests, each bounded, because a
// vm boots in seconds under TCG (DESIGN.md §5: no hardware virtualization
// here). One sandbox carries most checks.

// needVM skips the test when the shared daemon cannot run vm sandboxes, and
// returns the vm runtime's info.
func needVM(t *testing.T) api.RuntimeInfo {
	t.Helper()
	need(t)
	info, err := shared.client().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range info.Runtimes {
		if r.Name == "vm" {
			if !r.Available {
				t.Skipf("the vm runtime is unavailable on this node: %s", r.Reason)
			}
			return r
		}
	}
	t.Skip("this daemon has no vm runtime")
	return api.RuntimeInfo{}
}

// qemuOf returns the pids of QEMU processes of sandbox id (QEMU's -name
// guest=ID).
func qemuOf(id string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("guest="+id+",")) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func TestVMSandbox(t *testing.T) {
	rt := needVM(t)
	start := time.Now()
	id := shared.newSandbox(t, "--runtime", "vm")
	t.Logf("warren create --runtime vm: %v (accel %s)", time.Since(start).Round(time.Millisecond), rt.Accel)
	sb, err := shared.client().GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Runtime != "vm" || sb.Accel != rt.Accel || !strings.HasPrefix(sb.Isolation, "vm") {
		t.Errorf("sandbox: runtime %q accel %q isolation %q, want vm under %s", sb.Runtime, sb.Accel, sb.Isolation, rt.Accel)
	}
	if len(qemuOf(id)) != 1 {
		t.Errorf("QEMU processes of %s: %v, want one", id, qemuOf(id))
	}

	t.Run("guest kernel", func(t *testing.T) {
		var host unix.Utsname
		unix.Uname(&host)
		hostRelease := unix.ByteSliceToString(host.Release[:])
		if got := strings.TrimSpace(shared.sh(t, id, "uname -r")); !strings.HasPrefix(got, "6.1") || got == hostRelease {
			t.Errorf("uname -r: %q, want the guest's 6.1 kernel (the host runs %s)", got, hostRelease)
		}
		if got := shared.sh(t, id, "cat /proc/1/cmdline"); got != "/init\x00" {
			t.Errorf("/proc/1/cmdline: %q, want the initramfs's /init (the guest agent)", got)
		}
		if got := strings.TrimSpace(shared.sh(t, id, "cat /proc/1/comm")); got != "warren-agent" {
			t.Errorf("/proc/1/comm: %q, want warren-agent", got)
		}
		cpu := shared.sh(t, id, "cat /proc/cpuinfo")
		if !strings.Contains(cpu, "processor") || (rt.Accel == "tcg" && !strings.Contains(cpu, "QEMU")) {
			t.Errorf("/proc/cpuinfo is not the guest's:\n%.400s", cpu)
		}
		if got := shared.sh(t, id, "dmesg | head -n 3"); !strings.Contains(got, "Linux version 6.1") {
			t.Errorf("dmesg does not start with the guest kernel's banner: %q", got)
		}
		// The guest's process list: the agent, kernel threads and ps itself.
		ps := shared.sh(t, id, "ps -e -o comm=")
		for _, comm := range strings.Fields(ps) {
			if comm == "warren" || strings.HasPrefix(comm, "qemu") || comm == "systemd" {
				t.Errorf("the guest's process list shows a host process %q:\n%s", comm, ps)
			}
		}
	})
	t.Run("exec contract", func(t *testing.T) { execContract(t, shared, id) })
	t.Run("files contract", func(t *testing.T) { filesContract(t, shared, id) })

	t.Run("snapshot restores into a container", func(t *testing.T) {
		want := shared.sh(t, id, `mkdir -p /root/work && cd /root/work && echo from-vm > vm.txt &&
			head -c 1000000 /dev/urandom > rand && `+checkState)
		sn := shared.snapshot(t, id)
		// auto never picks a vm under tcg: the restore is cross-runtime there.
		kid := shared.restore(t, sn, 1)[0]
		kb, err := shared.client().GetSandbox(context.Background(), kid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("restored %s into runtime %s", sn, kb.Runtime)
		if got := shared.sh(t, kid, checkState); got != want {
			t.Errorf("restored sandbox (runtime %s): %q, want %q", kb.Runtime, got, want)
		}
	})

	t.Run("delete kills QEMU", func(t *testing.T) {
		if _, errOut, code := shared.cli(t, nil, "rm", id); code != 0 {
			t.Fatalf("warren rm: exit %d: %s", code, errOut)
		}
		eventually(t, 15*time.Second, "QEMU of the deleted sandbox to be gone", func() bool { return len(qemuOf(id)) == 0 })
	})
}

// TestVMInfoAndSelection: warren info shows the vm runtime and its accel;
// auto does not pick a tcg vm; --require-isolation vm refuses containers.
func TestVMInfoAndSelection(t *testing.T) {
	rt := needVM(t)
	out, errOut, code := shared.cli(t, nil, "info")
	if code != 0 {
		t.Fatalf("warren info: exit %d: %s", code, errOut)
	}
	found := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "vm" {
			found = strings.Contains(l, "accel: "+rt.Accel) && strings.Contains(l, "available")
		}
	}
	if !found {
		t.Errorf("warren info does not show the vm runtime with accel %s:\n%s", rt.Accel, out)
	}
	if rt.Accel == "tcg" {
		id := shared.newSandbox(t)
		if sb, err := shared.client().GetSandbox(context.Background(), id); err != nil || sb.Runtime != "container" {
			t.Errorf("auto under tcg picked %+v (%v), want the container runtime", sb, err)
		}
	}

	strict := startNode(t, nil, "--require-isolation", "vm")
	_, errOut, code = strict.cli(t, nil, "create", "--runtime", "container")
	if code == 0 || !strings.Contains(errOut, "requires vm isolation") {
		t.Errorf("create --runtime container on a node requiring vm: exit %d, stderr %q; want a refusal naming the requirement", code, errOut)
	}
}
