//go:build linux

package cgroup

import (
	"bufio"
	"fmt"
	"os"
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
