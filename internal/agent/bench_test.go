//go:build linux

package agent_test

import (
	"context"
	"os/exec"
	"testing"

	"warren/internal/agent"
)

// BenchmarkExecTrue is the full round trip of running `true` through the
// agent: Start over the unix socket, fork/exec, reap, EndEvent back.
func BenchmarkExecTrue(b *testing.B) {
	conn, _ := startAgent(b, agent.Options{})
	ctx := context.Background()
	req := cmd("true")
	for b.Loop() {
		end, _, err := conn.Run(ctx, req, nil, nil)
		if err != nil || end.GetExitCode() != 0 {
			b.Fatalf("run: %v %v", end, err)
		}
	}
}

// BenchmarkForkExecTrue is the baseline: os/exec running `true` directly.
// It must not run while an agent reaps in this process (none does once the
// benchmark above has finished).
func BenchmarkForkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
