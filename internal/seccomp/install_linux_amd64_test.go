//go:build linux && amd64

package seccomp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A filter cannot be removed, so every test that installs one does it in a
// child: the test binary re-executed with probeEnv naming what to do.
const probeEnv = "WARREN_SECCOMP_PROBE"

func TestMain(m *testing.M) {
	mode := os.Getenv(probeEnv)
	if mode == "" {
		os.Exit(m.Run())
	}
	// Probes that change per-thread state (unshare) stay on this thread.
	runtime.LockOSThread()
	switch mode {
	case "filtered", "unfiltered":
		report(probeAll(mode == "filtered"))
	case "rules":
		report(probeRules())
	case "x32", "x32-unfiltered":
		if mode == "x32" {
			must(Install())
		}
		_, _, errno := unix.RawSyscall(x32Bit|unix.SYS_GETPID, 0, 0, 0)
		fmt.Printf("x32 getpid returned, errno %d\n", errno)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", probeEnv, mode)
		os.Exit(2)
	}
	os.Exit(0)
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func report(results map[string]string) {
	must(json.NewEncoder(os.Stdout).Encode(results))
}

// outcome is how a probe ended: "ok", or the errno's name, or an error.
func outcome(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno) && errno == 0:
		return "ok"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	default:
		return err.Error()
	}
}

func rawErr(trap uintptr, args ...uintptr) error {
	var a [6]uintptr
	copy(a[:], args)
	_, _, errno := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
	if errno != 0 {
		return errno
	}
	return nil
}

// Persona flags from linux/personality.h.
const (
	addrNoRandomize = 0x0040000
	readImpliesExec = 0x0400000
)

// probes are what the child tries after installing the filter (or, for
// the control run, without it), with the outcome the filter must give.
var probes = []struct {
	name string
	want string
	try  func() error
}{
	{"unshare(CLONE_NEWUSER)", "EPERM", func() error { return unix.Unshare(unix.CLONE_NEWUSER) }},
	{"unshare(CLONE_NEWNS)", "EPERM", func() error { return unix.Unshare(unix.CLONE_NEWNS) }},
	{"unshare(CLONE_NEWNET)", "EPERM", func() error { return unix.Unshare(unix.CLONE_NEWNET) }},
	{"unshare(CLONE_NEWTIME)", "EPERM", func() error { return unix.Unshare(unix.CLONE_NEWTIME) }},
	{"clone(CLONE_NEWUSER) via os/exec", "EPERM", func() error { return runTrue(unix.CLONE_NEWUSER) }},
	{"clone(CLONE_NEWPID) via os/exec", "EPERM", func() error { return runTrue(unix.CLONE_NEWPID) }},
	{"mount", "EPERM", func() error {
		return unix.Mount("none", "/nonexistent-warren-seccomp", "warren-nofs", 0, "")
	}},
	{"keyctl", "EPERM", func() error { return rawErr(unix.SYS_KEYCTL, 0xffff) }},
	{"bpf", "EPERM", func() error { return rawErr(unix.SYS_BPF, ^uintptr(0)) }},
	{"clone3", "ENOSYS", func() error { return rawErr(unix.SYS_CLONE3, 0, 0) }},
	{"init_module", "EPERM", func() error { return rawErr(unix.SYS_INIT_MODULE, 0, 0, 0) }},
	{"io_uring_setup", "EPERM", func() error { return rawErr(unix.SYS_IO_URING_SETUP, 1, 0) }},
	{"setns", "EPERM", func() error { return unix.Setns(-1, 0) }},
	{"personality(READ_IMPLIES_EXEC)", "EPERM", func() error { return rawErr(unix.SYS_PERSONALITY, readImpliesExec) }},
	{"personality(ADDR_NO_RANDOMIZE)", "EPERM", func() error { return rawErr(unix.SYS_PERSONALITY, addrNoRandomize) }},

	// Ordinary work goes on.
	{"personality query", "ok", func() error { return rawErr(unix.SYS_PERSONALITY, 0xffffffff) }},
	{"unshare(CLONE_FS)", "ok", func() error { return unix.Unshare(unix.CLONE_FS) }},
	{"getpid", "ok", func() error { return rawErr(unix.SYS_GETPID) }},
	{"fork/exec /bin/true", "ok", func() error { return runTrue(0) }},
	{"file write and read", "ok", fileRoundTrip},
}

func runTrue(cloneflags uintptr) error {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: cloneflags}
	return cmd.Run()
}

func fileRoundTrip() error {
	dir, err := os.MkdirTemp("", "seccomp-probe")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("hello"), 0o600); err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(data) != "hello" {
		return fmt.Errorf("read back %q", data)
	}
	return nil
}

// Names of the TSYNC checks in a probe report.
const (
	otherThreadProbe  = "other thread: unshare(CLONE_NEWNS)"
	threadStatusProbe = "every thread: Seccomp 2, NoNewPrivs 1"
)

// probeAll runs the probes, after Install when filtered. It also checks
// TSYNC: a thread that existed before Install must be filtered too, and
// every thread must report the filter and no_new_privs in its status.
func probeAll(filtered bool) map[string]string {
	type threadResult struct {
		tid int
		err error
	}
	otherReady := make(chan int)
	goOn := make(chan struct{})
	otherDone := make(chan threadResult)
	go func() {
		runtime.LockOSThread()
		otherReady <- unix.Gettid()
		<-goOn
		otherDone <- threadResult{unix.Gettid(), unix.Unshare(unix.CLONE_NEWNS)}
	}()
	otherTid := <-otherReady
	if filtered {
		must(Install())
	}
	results := make(map[string]string)
	for _, p := range probes {
		results[p.name] = outcome(p.try())
	}
	close(goOn)
	other := <-otherDone
	switch {
	case other.tid == unix.Gettid() || other.tid != otherTid:
		results[otherThreadProbe] = fmt.Sprintf("ran on thread %d, want a thread other than %d, created before Install", other.tid, unix.Gettid())
	default:
		results[otherThreadProbe] = outcome(other.err)
	}
	results[threadStatusProbe] = outcome(threadsFiltered())
	return results
}

// threadsFiltered checks /proc/self/task/*/status of every thread.
func threadsFiltered() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	if len(tasks) < 2 {
		return fmt.Errorf("only %d threads: nothing to synchronise", len(tasks))
	}
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited since the listing
		}
		if err != nil {
			return err
		}
		status := string(data)
		if !strings.Contains(status, "\nSeccomp:\t2\n") || !strings.Contains(status, "\nNoNewPrivs:\t1\n") {
			return fmt.Errorf("thread %s lacks the filter or no_new_privs", task.Name())
		}
	}
	return nil
}

// probeRules calls every syscall the rules deny, except personality (whose
// all-ones argument is the allowed query), with every argument all ones:
// were the filter to let one through, the kernel would reject such
// arguments (bad pointers, descriptors, flags or magic numbers) without
// changing anything. The child runs in its own session, without a
// controlling terminal, so vhangup has nothing to hang up either.
func probeRules() map[string]string {
	must(Install())
	results := make(map[string]string)
	all := ^uintptr(0)
	for _, r := range rules {
		if r.kind == denyPersonality {
			continue
		}
		results[r.name] = outcome(rawErr(uintptr(r.nr), all, all, all, all, all, all))
	}
	return results
}

// child runs the test binary as a probe in a new session and decodes its
// report.
func child(t *testing.T, mode string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), probeEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("probe %s: %v\nstdout: %s\nstderr: %s", mode, err, out, stderr)
	}
	results := make(map[string]string)
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("probe %s: %v in %q", mode, err, out)
	}
	return results
}

func TestInstallDeniesAndAllows(t *testing.T) {
	got := child(t, "filtered")
	want := map[string]string{otherThreadProbe: "EPERM", threadStatusProbe: "ok"}
	for _, p := range probes {
		want[p.name] = p.want
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("with the filter, %s: got %s, want %s", name, got[name], w)
		}
	}

	// The control run shows the denials come from the filter and not from
	// the test's environment: without it, as root, each denied probe ends
	// differently (it succeeds, or the kernel rejects its arguments).
	if os.Geteuid() != 0 {
		t.Log("not root: skipping the unfiltered control run")
		return
	}
	control := child(t, "unfiltered")
	if control[threadStatusProbe] == "ok" {
		t.Errorf("without the filter, %s: got ok, want the check to notice", threadStatusProbe)
	}
	for name, w := range want {
		if name == threadStatusProbe {
			continue
		}
		if w == "ok" {
			if control[name] != "ok" {
				t.Errorf("without the filter, %s: got %s, want ok", name, control[name])
			}
			continue
		}
		if control[name] == w {
			t.Errorf("without the filter, %s also gives %s: the test cannot tell the filter's work from the environment's", name, w)
		}
	}
	t.Logf("control run without the filter: %v", control)
}

func TestInstallDeniesEveryRule(t *testing.T) {
	got := child(t, "rules")
	for _, r := range rules {
		want := "EPERM"
		switch r.kind {
		case denyPersonality:
			continue
		case denyENOSYS:
			want = "ENOSYS"
		}
		if got[r.name] != want {
			t.Errorf("with the filter, %s(-1, …): got %s, want %s", r.name, got[r.name], want)
		}
	}
}

func TestInstallKillsX32(t *testing.T) {
	run := func(mode string) (*os.ProcessState, string) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), probeEnv+"="+mode)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState, string(out)
	}
	ps, out := run("x32")
	ws := ps.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Errorf("x32 syscall under the filter: %v, output %q; want the process killed by SIGSYS", ps, out)
	}
	// Without the filter the same call returns (ENOSYS where the kernel
	// lacks x32): the kill is the filter's.
	if ps, out := run("x32-unfiltered"); !ps.Success() {
		t.Errorf("x32 syscall without the filter: %v, output %q; want it to return", ps, out)
	}
}
