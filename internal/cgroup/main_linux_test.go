//go:build linux

package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
)

// helperEnv makes the test binary, re-executed as a child, act as one of
// the helper processes below instead of running tests.
const helperEnv = "WARREN_CGROUP_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "alloc":
		helperAlloc()
	case "forker":
		helperForker()
	case "agent":
		helperAgent()
	case "hog":
		helperHog()
	default:
		fmt.Fprintf(os.Stderr, "unknown %s %q\n", helperEnv, os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// waitGate blocks until the test has put this process into its cgroup and
// says go by writing a line on stdin.
func waitGate() {
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "gate:", err)
		os.Exit(2)
	}
}

// helperAlloc touches 256 MiB, far over the test's memory limit, and says
// "survived" if the OOM killer did not stop it.
func helperAlloc() {
	waitGate()
	b := make([]byte, 256<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("survived")
	os.Exit(0)
}

// helperForker forks /bin/sleep children forever, ignoring failures (the
// pids limit makes many), so that Kill has to deal with a group whose
// membership changes under it.
func helperForker() {
	waitGate()
	attr := &syscall.ProcAttr{Files: []uintptr{^uintptr(0), ^uintptr(0), ^uintptr(0)}}
	for {
		syscall.ForkExec("/bin/sleep", []string{"sleep", "100"}, attr)
	}
}

// helperAgent acts as the container runtime's agent towards a work
// subgroup (Group.Work), whose tasks files it inherits as fds 3 and 4: it
// holds 32 MiB of its own, moves one locked thread into the subgroup,
// starts a memory hog from that thread, and reports how the hog ended and
// where it ran. It exits 0 if it survived that.
func helperAgent() {
	waitGate()
	own := make([]byte, 32<<20)
	for i := 0; i < len(own); i += 4096 {
		own[i] = 1
	}
	type result struct {
		pid int
		err error
	}
	started := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		tid := []byte(strconv.Itoa(syscall.Gettid()))
		for _, fd := range []int{3, 4} {
			if _, err := syscall.Write(fd, tid); err != nil {
				started <- result{err: fmt.Errorf("join work cgroup: %w", err)}
				return
			}
			syscall.Close(fd)
		}
		attr := &syscall.ProcAttr{Env: []string{helperEnv + "=hog"}, Files: []uintptr{0, 1, 2}}
		pid, err := syscall.ForkExec(os.Args[0], os.Args[:1], attr)
		started <- result{pid, err}
	}()
	r := <-started
	if r.err != nil {
		fmt.Fprintln(os.Stderr, r.err)
		os.Exit(2)
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", r.pid))
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(r.pid, &ws, 0, nil); err != nil {
		fmt.Fprintln(os.Stderr, "wait:", err)
		os.Exit(2)
	}
	fmt.Printf("hog: killed %v (%v)\n%s", ws.Signaled() && ws.Signal() == syscall.SIGKILL, ws, cg)
	for i := 0; i < len(own); i += 4096 {
		own[i]++
	}
	fmt.Println("agent survived")
}

// helperHog touches 256 MiB and says "survived" if nothing stopped it.
func helperHog() {
	b := make([]byte, 256<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("hog survived")
}
