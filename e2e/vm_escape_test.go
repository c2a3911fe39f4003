//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warren/api"
	"warren/internal/consolelog"
	"warren/internal/disk/disktest"
	"warren/internal/vmm/qemu"
	"warren/internal/wait"
)

// Escape attempts from inside a vm sandbox, and faults of its VMM, as the
// vm rows of docs/SECURITY.md list them. The guest's root is root of its
// own kernel, so unlike in a container every privileged call succeeds
// inside: what is checked is that nothing of it reaches the host, the daemon
// or another sandbox. Under TCG (this machine) the boundary is QEMU's
// emulator, not hardware; the tests run the same under KVM.
//
// Bounded: two VM boots in all (TestVMEscape carries every probe in one
// sandbox and ends it with a guest reboot; TestVMMKilled is the other).

// vmExec runs a shell script in vm sandbox id as root, with a timeout
// fit for a guest under software emulation.
func vmExec(t *testing.T, id, script string, timeout time.Duration) *api.ExecResult {
	t.Helper()
	res, err := shared.client().Exec(context.Background(), id, api.ExecRequest{
		Shell: script, TimeoutMs: timeout.Milliseconds(),
	})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}

// procStatus is /proc/PID/status as name → value (tabs folded to spaces).
func procStatus(t *testing.T, pid string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatal(err)
	}
	st := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			st[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return st
}

// cgroupValue reads a file of sandbox id's cgroup: v1File of controller
// on cgroup v1, v2File on v2; "" when neither exists.
func cgroupValue(id, controller, v1File, v2File string) string {
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup", controller, "warren", id, v1File),
		filepath.Join("/sys/fs/cgroup/warren", id, v2File),
	} {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// hostBootTime is btime of /proc/stat: it changes only if the host reboots.
func hostBootTime(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			return v
		}
	}
	t.Fatal("no btime in /proc/stat")
	return ""
}

// keptDisk checks that failed sandbox id kept its disk (issue 13, item 7),
// then deletes it.
func keptDisk(t *testing.T, id string) {
	t.Helper()
	c := shared.client()
	sb, err := c.GetSandbox(context.Background(), id)
	if err != nil || !sb.DiskKept || !exists(filepath.Join(shared.dataDir, "disks", "sandboxes", id+".img")) {
		t.Errorf("failed sandbox %+v (%v): want its disk kept", sb, err)
	}
	if err := c.DeleteSandbox(context.Background(), id); err != nil {
		t.Errorf("delete the failed sandbox: %v", err)
	}
}

// vmGone waits until nothing of vm sandbox id is left on the host: no
// QEMU, no cgroup in any controller, no router namespace, no disk image, no
// private directory.
func vmGone(t *testing.T, id string) {
	t.Helper()
	left := func() []string {
		var l []string
		if p := qemuOf(id); len(p) > 0 {
			l = append(l, "QEMU "+strings.Join(p, ","))
		}
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/warren/" + id)
		if v2 := "/sys/fs/cgroup/warren/" + id; exists(v2) {
			dirs = append(dirs, v2)
		}
		l = append(l, dirs...)
		routers, _ := filepath.Glob("/run/warren/net/*/" + id) // its network's router namespace
		l = append(l, routers...)
		for _, p := range []string{
			filepath.Join(shared.dataDir, "disks", "sandboxes", id+".img"),
			filepath.Join(shared.dataDir, "sandboxes", id),
		} {
			if exists(p) {
				l = append(l, p)
			}
		}
		return l
	}
	wait.For(t, 20*time.Second, "nothing left behind by "+id, func() bool { return len(left()) == 0 })
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// healthy checks that the daemon serves and that sandbox other (a container
// of the same template) still runs commands.
func healthy(t *testing.T, other string) {
	t.Helper()
	resp, err := http.Get(shared.url + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %v %v", resp, err)
	}
	if resp != nil {
		resp.Body.Close()
	}
	res, err := shared.client().Exec(context.Background(), other, api.ExecRequest{Shell: "echo alive"})
	if err != nil || res.Stdout != "alive\n" {
		t.Errorf("the neighbouring sandbox: %+v %v", res, err)
	}
}

// TestVMEscape: one vm sandbox (256 MiB, 1 vCPU), attacked from inside as
// the guest's root, and its QEMU inspected from the host; it ends with a
// guest reboot, which ends the sandbox.
func TestVMEscape(t *testing.T) {
	rt := needVM(t)
	ctx := context.Background()
	c := shared.client()
	// A neighbour of the same template, and a host process and file that
	// must stay out of the guest's reach.
	neighbour := shared.newSandbox(t, "--runtime", "container")
	marker := randomHex(t)
	hostFile := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(hostFile, []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostArg := fmt.Sprintf("86399.%d", time.Now().UnixNano()%1e9) // a host process's unique argv
	sleeper := exec.Command("sleep", hostArg)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	template := filepath.Join(shared.dataDir, "disks", "templates", "default.img")
	templateHead := disktest.ReadAt(t, template, 0, 4096)
	bootTime := hostBootTime(t)

	id := shared.newSandbox(t, "--runtime", "vm", "--memory", "256", "--cpus", "1")
	t.Logf("vm sandbox %s, accel %s", id, rt.Accel)
	pids := qemuOf(id)
	if len(pids) != 1 {
		t.Fatalf("QEMU processes of %s: %v, want one", id, pids)
	}
	pid := pids[0]

	// The QEMU process, seen from the host: jailed, unprivileged, limited.
	t.Run("qemu jail", func(t *testing.T) {
		st := procStatus(t, pid)
		for _, k := range []string{"Uid", "Gid"} {
			ids := strings.Fields(st[k])
			if len(ids) != 4 {
				t.Fatalf("%s: %q", k, st[k])
			}
			for _, v := range ids {
				n, _ := strconv.ParseUint(v, 10, 32)
				if n < qemu.DefaultUIDBase || n >= qemu.DefaultUIDBase+qemu.DefaultUIDCount {
					t.Errorf("QEMU %s: %s, want every id in the machines' range from %d", k, st[k], qemu.DefaultUIDBase)
				}
			}
		}
		if st["Groups"] != "" {
			t.Errorf("QEMU's supplementary groups: %q, want none", st["Groups"])
		}
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
			if st[k] != "0000000000000000" {
				t.Errorf("QEMU %s: %s, want none", k, st[k])
			}
		}
		if st["NoNewPrivs"] != "1" {
			t.Errorf("QEMU NoNewPrivs: %q, want 1", st["NoNewPrivs"])
		}
		checkNoStray(t, pid)
		// QEMU's -sandbox filter, synchronized to every thread.
		tasks, _ := filepath.Glob(filepath.Join("/proc", pid, "task", "*"))
		for _, task := range tasks {
			if s := procStatus(t, strings.TrimPrefix(task, "/proc/")); s["Seccomp"] != "2" {
				t.Errorf("QEMU thread %s (%s): Seccomp %q, want 2 (filter)", filepath.Base(task), s["Name"], s["Seccomp"])
			}
		}
		if f := strings.Fields(st["NSpid"]); len(f) != 2 || f[1] != "1" {
			t.Errorf("QEMU NSpid: %q, want PID 1 of a pid namespace of its own", st["NSpid"])
		}
		for _, ns := range []string{"pid", "mnt", "net", "uts", "ipc"} {
			mine, _ := os.Readlink("/proc/self/ns/" + ns)
			its, err := os.Readlink(filepath.Join("/proc", pid, "ns", ns))
			if err != nil || its == mine {
				t.Errorf("QEMU's %s namespace: %q (%v), the host's is %q; want its own", ns, its, err, mine)
			}
		}
		limits, _ := os.ReadFile(filepath.Join("/proc", pid, "limits"))
		if !bytes.Contains(limits, []byte("Max core file size        0                    0")) {
			t.Errorf("QEMU may dump core (guest memory):\n%s", limits)
		}
		// Its root shows /usr, the loader's links, a few devices and the
		// kernel and initrd: no /tmp, /proc, /etc files, data directory.
		root := filepath.Join("/proc", pid, "root")
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
			switch e.Name() {
			case "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "vm":
			default:
				t.Errorf("QEMU's root holds %q", e.Name())
			}
		}
		t.Logf("QEMU's root: %v", names)
		for _, p := range []string{hostFile, shared.dataDir, "/etc/shadow", "/proc/1"} {
			if exists(root + p) {
				t.Errorf("%s is visible in QEMU's root", p)
			}
		}
		devs, _ := os.ReadDir(filepath.Join(root, "dev"))
		for _, d := range devs {
			switch d.Name() {
			case "null", "zero", "random", "urandom", "kvm":
			default:
				t.Errorf("QEMU's /dev holds %q", d.Name())
			}
		}
		// Its descriptors: its own disk, logs and sockets; not the daemon's
		// database, key, templates or another sandbox's disk.
		fds, _ := filepath.Glob(filepath.Join("/proc", pid, "fd", "*"))
		for _, fd := range fds {
			target, _ := os.Readlink(fd)
			if strings.HasPrefix(target, shared.dataDir) &&
				!strings.Contains(target, "/sandboxes/"+id) && !strings.Contains(target, "/"+id+".img") {
				t.Errorf("QEMU holds %s", target)
			}
		}
		// Its cgroup and its limits: 1 vCPU, guest memory plus overhead
		// (swap capped with it), pids.
		cg, _ := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
		if !strings.Contains(string(cg), "/warren/"+id+"\n") {
			t.Errorf("QEMU is not in the sandbox's cgroup:\n%s", cg)
		}
		mem, _ := strconv.ParseInt(cgroupValue(id, "memory", "memory.limit_in_bytes", "memory.max"), 10, 64)
		if mem < 256<<20 || mem > 512<<20 {
			t.Errorf("QEMU's memory limit: %d, want guest memory (256 MiB) plus at most 256 MiB", mem)
		}
		if sw := cgroupValue(id, "memory", "memory.memsw.limit_in_bytes", "memory.swap.max"); sw != strconv.FormatInt(mem, 10) && sw != "0" {
			t.Errorf("QEMU's memory+swap limit: %s, want %d (no swap beyond the limit)", sw, mem)
		}
		pidsMax, _ := strconv.Atoi(cgroupValue(id, "pids", "pids.max", "pids.max"))
		if pidsMax <= 0 || pidsMax > 200 {
			t.Errorf("QEMU's pids limit: %d", pidsMax)
		}
		quota := cgroupValue(id, "cpu", "cpu.cfs_quota_us", "cpu.max")
		period := cgroupValue(id, "cpu", "cpu.cfs_period_us", "cpu.max")
		if q, p := strings.Fields(quota), strings.Fields(period); len(q) == 0 || len(p) == 0 || q[0] != p[len(p)-1] {
			t.Errorf("QEMU's CPU quota: %q per %q, want one core (the whole period)", quota, period)
		}
		t.Logf("QEMU pid %s: Uid %s, NoNewPrivs %s, Seccomp %s, memory limit %d MiB, pids.max %d, cpu quota %s",
			pid, st["Uid"], st["NoNewPrivs"], st["Seccomp"], mem>>20, pidsMax, quota)
	})

	// The guest's processes are its own; a host process is not among them.
	t.Run("host processes", func(t *testing.T) {
		res := vmExec(t, id, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done; echo; ps -e -o comm= | sort -u`, time.Minute)
		if strings.Contains(res.Stdout, hostArg) {
			t.Errorf("the guest sees the host's process sleep %s", hostArg)
		}
		for _, comm := range strings.Fields(res.Stdout) {
			if comm == "warren" || strings.HasPrefix(comm, "qemu") || comm == "systemd" || comm == "go" {
				t.Errorf("the guest sees a host process %q", comm)
			}
		}
	})

	// Host files are not reachable: not by path, not anywhere under the
	// guest's /, and no device could share them (no 9p, no virtio-fs).
	t.Run("host files", func(t *testing.T) {
		for _, p := range []string{hostFile, filepath.Join(shared.dataDir, "admin.key"), template} {
			if res := vmExec(t, id, "cat "+p, time.Minute); res.ExitCode == 0 {
				t.Errorf("the guest read host path %s", p)
			}
		}
		t0 := time.Now()
		res := vmExec(t, id, "grep -rlI --exclude-dir=proc --exclude-dir=sys "+marker+" / 2>/dev/null; echo done", 5*time.Minute)
		if strings.TrimSpace(res.Stdout) != "done" {
			t.Errorf("the host's secret is reachable from the guest: %q", res.Stdout)
		}
		t.Logf("grep -r / in the guest: %v", time.Since(t0).Round(time.Millisecond))
		// The guest's virtio devices: block (2), console (3), entropy (4),
		// network (1). No 9p (9) or virtio-fs (26) share of a host tree.
		res = vmExec(t, id, "cat /sys/bus/virtio/devices/*/device; echo; ls /sys/block", time.Minute)
		for _, f := range strings.Fields(res.Stdout) {
			switch f {
			case "0x0001", "0x0002", "0x0003", "0x0004", "vda":
			default:
				t.Errorf("the guest has device %q (virtio devices and block devices: %q)", f, res.Stdout)
			}
		}
		res = vmExec(t, id, `mkdir -p /mnt/h; for fs in 9p virtiofs; do mount -t $fs -o trans=virtio host /mnt/h 2>&1 && echo MOUNTED $fs; mount -t $fs warren /mnt/h 2>&1 && echo MOUNTED $fs; done; modprobe 9p 2>&1; grep -E '9p|virtiofs' /proc/filesystems; true`, time.Minute)
		if strings.Contains(res.Stdout, "MOUNTED") {
			t.Errorf("a host share mounted in the guest:\n%s", res.Stdout)
		}
		t.Logf("mount attempts:\n%s", res.Stdout)
	})

	// The guest's kernel was booted with warren's arguments only: nothing
	// of the host's command line, and its boot id is its own. Its root
	// disk passes discards down (ext4 -o discard, QEMU discard=unmap).
	t.Run("host kernel", func(t *testing.T) {
		res := vmExec(t, id, "cat /proc/cmdline /proc/sys/kernel/random/boot_id; grep ' / ' /proc/mounts; cat /sys/block/vda/queue/discard_max_bytes", time.Minute)
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 4 {
			t.Fatalf("guest output %q %q", res.Stdout, res.Stderr)
		}
		for _, arg := range strings.Fields(lines[0]) {
			switch {
			case arg == "console=ttyS0", arg == "panic=-1", strings.HasPrefix(arg, "warren."):
			default:
				t.Errorf("the guest's kernel command line %q holds %q, not one of warren's", lines[0], arg)
			}
		}
		if hostBoot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id"); lines[1] == strings.TrimSpace(string(hostBoot)) {
			t.Errorf("the guest's boot id is the host's")
		}
		if !strings.Contains(lines[2], "discard") || lines[3] == "0" {
			t.Errorf("the guest's root disk does not discard: mount %q, discard_max_bytes %q", lines[2], lines[3])
		}
	})

	// Root of the guest owns its kernel: every capability, its own clock and
	// hostname. None of it is the host's.
	t.Run("guest root", func(t *testing.T) {
		hostName, _ := os.Hostname()
		wall0, mono0 := time.Now().Round(0), time.Now()
		res := vmExec(t, id, `grep CapEff /proc/self/status; mount -t tmpfs t /mnt && echo mounted;
			hostname pwned && hostname; date -s @978307200 >/dev/null && date -u +%Y; date -s @`+strconv.FormatInt(time.Now().Unix(), 10)+` >/dev/null`, time.Minute)
		t.Logf("as the guest's root: %q %q", res.Stdout, res.Stderr)
		if !strings.Contains(res.Stdout, "CapEff:\t000001ffffffffff") || !strings.Contains(res.Stdout, "mounted") ||
			!strings.Contains(res.Stdout, "pwned\n2001") {
			t.Errorf("the guest's root is not root of its own kernel (capabilities, mount, hostname, clock): %q %q", res.Stdout, res.Stderr)
		}
		if now, _ := os.Hostname(); now != hostName {
			t.Errorf("host hostname changed from %q to %q", hostName, now)
		}
		if drift := time.Now().Round(0).Sub(wall0) - time.Since(mono0); drift > time.Second || drift < -time.Second {
			t.Errorf("host clock moved by %v", drift)
		}
	})

	// A memory bomb as the guest's root: the guest's OOM killer ends it;
	// QEMU stays under its cgroup's limit, and the agent keeps serving.
	t.Run("memory bomb", func(t *testing.T) {
		os.WriteFile(filepath.Join("/sys/fs/cgroup/memory/warren", id, "memory.max_usage_in_bytes"), []byte("0"), 0)
		failcnt := cgroupValue(id, "memory", "memory.failcnt", "memory.events")
		t0 := time.Now()
		res, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"python3", "-c",
			"import sys\nl = []\nwhile True:\n    l.append(b'\\x01' * (16 << 20))\n    print(len(l) * 16, flush=True)"},
			TimeoutMs: 120000})
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Fields(res.Stdout)
		reached := "0"
		if len(lines) > 0 {
			reached = lines[len(lines)-1]
		}
		t.Logf("memory bomb in a 256 MiB guest: %s after %v, reached %s MiB", res.Status, time.Since(t0).Round(time.Millisecond), reached)
		if res.ExitCode != 137 && !strings.Contains(res.Status, "killed") {
			t.Errorf("memory bomb: exit %d (%s), want killed by the guest's OOM killer; stderr %q", res.ExitCode, res.Status, res.Stderr)
		}
		if p := qemuOf(id); len(p) != 1 || p[0] != pid {
			t.Fatalf("QEMU after the memory bomb: %v, want the same process %s", p, pid)
		}
		if out := shared.sh(t, id, "dmesg | grep -c 'Out of memory' || true"); strings.TrimSpace(out) == "0" {
			t.Errorf("no OOM kill in the guest's kernel log")
		}
		limit, _ := strconv.ParseInt(cgroupValue(id, "memory", "memory.limit_in_bytes", "memory.max"), 10, 64)
		peak, _ := strconv.ParseInt(cgroupValue(id, "memory", "memory.max_usage_in_bytes", "memory.peak"), 10, 64)
		t.Logf("QEMU's cgroup: peak %d MiB of its %d MiB limit, failcnt %q → %q", peak>>20, limit>>20,
			failcnt, cgroupValue(id, "memory", "memory.failcnt", "memory.events"))
		st := memStat(id)
		t.Logf("QEMU's cgroup after the bomb: rss %d MiB, cache %d MiB, kmem %d MiB; QEMU VmRSS %d MiB",
			st["rss"]>>20, st["cache"]>>20, cgroupKmem(id)>>20, statusBytes(pid, "VmRSS")>>20)
		if peak == 0 || peak > limit {
			t.Errorf("QEMU's cgroup peak %d, limit %d", peak, limit)
		}
		healthy(t, neighbour)
	})

	// Writing the raw block device as the guest's root changes the
	// sandbox's own clone only: not the template, not a neighbour's disk.
	// (Bytes 0-511 of an ext4 volume are unused, so the guest runs on.)
	t.Run("raw disk", func(t *testing.T) {
		neighbourDisk := filepath.Join(shared.dataDir, "disks", "sandboxes", neighbour+".img")
		neighbourHead := disktest.ReadAt(t, neighbourDisk, 0, 4096)
		vmExec(t, id, "printf '%s' "+marker+" > /tmp/m && dd if=/tmp/m of=/dev/vda bs=512 count=1 conv=sync,fsync 2>&1", time.Minute)
		own := disktest.ReadAt(t, filepath.Join(shared.dataDir, "disks", "sandboxes", id+".img"), 0, 512)
		if !bytes.HasPrefix(own, []byte(marker)) {
			t.Errorf("the guest's write did not reach its own disk image: %q", own[:64])
		}
		if got := disktest.ReadAt(t, template, 0, 4096); !bytes.Equal(got, templateHead) {
			t.Error("the template changed")
		}
		if got := disktest.ReadAt(t, neighbourDisk, 0, 4096); !bytes.Equal(got, neighbourHead) {
			t.Error("the neighbouring sandbox's disk changed")
		}
		if _, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); err != nil {
			t.Errorf("the guest after its raw write: %v", err)
		}
	})

	// Writing the serial console without end as the guest's root grew the
	// host's console log by 4 MiB in 13 s (issue 13, item 11): the log now
	// stays within its bound, keeping the newest output.
	t.Run("console flood", func(t *testing.T) {
		if res := vmExec(t, id, "head -c 3145728 /dev/zero | tr '\\0' x > /dev/ttyS0 && echo flood-done > /dev/ttyS0", 3*time.Minute); res.ExitCode != 0 {
			t.Fatalf("the flood: %+v", res)
		}
		log := filepath.Join(shared.dataDir, "sandboxes", id, "console.log")
		wait.For(t, 30*time.Second, "the flood's end in the console log", func() bool {
			b, _ := os.ReadFile(log)
			return bytes.Contains(b, []byte("flood-done"))
		})
		if fi, err := os.Stat(log); err != nil || fi.Size() > consolelog.Max {
			t.Errorf("console log after 3 MiB to /dev/ttyS0: %v %v; want at most %d bytes", fi.Size(), err, consolelog.Max)
		}
	})

	// A reboot as the guest's root (sysrq b: immediate, no shutdown) ends
	// the machine (QEMU runs with -no-reboot): the sandbox is failed, with a
	// reason, and everything of it goes but its disk, until it is deleted;
	// the host did not reboot.
	t.Run("reboot", func(t *testing.T) {
		if _, err := c.StartProcess(ctx, id, api.ExecRequest{Shell: "sleep 0.5; echo b > /proc/sysrq-trigger"}); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 30*time.Second, "the rebooted sandbox to be failed", func() bool {
			sb, err := c.GetSandbox(ctx, id)
			return err == nil && sb.State == api.StateFailed
		})
		sb, _ := c.GetSandbox(ctx, id)
		t.Logf("after the guest's reboot: state %s, error %q", sb.State, sb.Error)
		if !strings.Contains(sb.Error, "the guest powered off or rebooted") {
			t.Errorf("rebooted sandbox's reason %q does not say the guest rebooted", sb.Error)
		}
		if _, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); !api.IsCode(err, api.CodeConflict) {
			t.Errorf("exec in the rebooted sandbox: %v, want a conflict", err)
		}
		keptDisk(t, id)
		vmGone(t, id)
		healthy(t, neighbour)
		if hostBootTime(t) != bootTime {
			t.Error("the host rebooted")
		}
		if got := disktest.ReadAt(t, template, 0, 4096); !bytes.Equal(got, templateHead) {
			t.Error("the template changed")
		}
	})
}

// TestVMMKilled: kill -9 of a vm sandbox's QEMU from the host (a VMM crash)
// is detected: the sandbox is failed with a reason, the daemon says the VMM
// crashed and keeps serving, and nothing of the sandbox is left but its
// disk, until it is deleted.
func TestVMMKilled(t *testing.T) {
	needVM(t)
	ctx := context.Background()
	c := shared.client()
	neighbour := shared.newSandbox(t, "--runtime", "container")
	id := shared.newSandbox(t, "--runtime", "vm", "--memory", "256")
	pids := qemuOf(id)
	if len(pids) != 1 {
		t.Fatalf("QEMU processes of %s: %v, want one", id, pids)
	}
	pid, _ := strconv.Atoi(pids[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 15*time.Second, "the sandbox to be failed", func() bool {
		sb, err := c.GetSandbox(ctx, id)
		return err == nil && sb.State == api.StateFailed
	})
	sb, _ := c.GetSandbox(ctx, id)
	t.Logf("after kill -9 of its QEMU: state %s, error %q", sb.State, sb.Error)
	if !strings.Contains(sb.Error, "VMM (QEMU) crashed") || !strings.Contains(sb.Error, "signal 9") {
		t.Errorf("failed sandbox's reason %q does not say its VMM crashed by signal 9", sb.Error)
	}
	if _, err := c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}); !api.IsCode(err, api.CodeConflict) {
		t.Errorf("exec in the sandbox whose VMM died: %v, want a conflict", err)
	}
	keptDisk(t, id)
	vmGone(t, id)
	healthy(t, neighbour)
	crashed := false
	for _, l := range strings.Split(shared.log.String(), "\n") {
		if strings.Contains(l, "vmm crashed") && strings.Contains(l, id) {
			crashed = true
			t.Logf("daemon log: %s", l)
		}
	}
	if !crashed {
		t.Errorf("the daemon's log does not say the VMM of %s crashed:\n%s", id, shared.log.tail(20))
	}
}
