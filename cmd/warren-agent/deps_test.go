package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the guest agent small: it runs inside every sandbox, so it
// must not grow into the node's dependencies.
func TestDeps(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	banned := []string{"database/sql", "modernc.org/", "net/http/pprof", "warren/internal/server", "warren/internal/store", "warren/internal/sandbox", "warren/internal/daemon"}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, strings.TrimSuffix(b, "/")+"/") {
				t.Errorf("warren-agent imports %s", dep)
			}
		}
		if strings.HasPrefix(dep, "warren/") && !agentPackage(dep) {
			t.Errorf("warren-agent imports %s: only the agent, the container and VM inits, the container spawner and seccomp are allowed", dep)
		}
	}
}

// agentPackage reports whether a warren package may be part of the agent.
func agentPackage(pkg string) bool {
	switch pkg {
	case "warren/cmd/warren-agent", "warren/internal/agent", "warren/internal/seccomp",
		"warren/internal/runtime/container/containerinit", "warren/internal/runtime/container/spawner",
		"warren/internal/runtime/vm/vminit", "warren/internal/runtime/gvisor/gvisorinit", "warren/internal/vmport", "warren/internal/guest",
		"warren/internal/backoff", "warren/internal/fsfreeze", "warren/internal/unixmode", "warren/internal/osthread":
		return true
	}
	return strings.HasPrefix(pkg, "warren/internal/agent/")
}
