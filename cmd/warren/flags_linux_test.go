package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"warren/api"
)

// TestFlagsAfterArguments is the bug where a flag after the first argument
// printed the usage and failed: the three examples.
func TestFlagsAfterArguments(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID

	code, stdout, stderr := runCLI(t, nil, "snapshot", id, "--wait", "--scope", "root")
	snap := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(snap, "sn-") {
		t.Fatalf("snapshot ID --wait: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if sn, err := w.Manager.GetSnapshot(context.Background(), tenant, snap); err != nil || sn.State != api.SnapshotDurable || sn.Scope != "root" {
		t.Errorf("the snapshot after --wait: %+v, %v; want it durable, of the root disk", sn, err)
	}
	// This sandbox has no workspace disk: the server refuses the scope.
	if code, _, stderr := runCLI(t, nil, "snapshot", id, "--scope", "workspace"); code != 1 || !strings.Contains(stderr, "workspace") {
		t.Errorf("snapshot ID --scope workspace: exit %d stderr %q, want the server's refusal", code, stderr)
	}

	code, stdout, stderr = runCLI(t, nil, "restore", snap, "--count", "3", "--timeout", "1m")
	ids := strings.Fields(stdout)
	if code != 0 || len(ids) != 3 {
		t.Fatalf("restore SNAP --count 3: exit %d stdout %q stderr %q, want 3 IDs", code, stdout, stderr)
	}
	for _, id := range ids {
		if sb := w.get(id); sb.State != api.StateRunning || sb.Origin != snap || sb.ExpiresAt.Sub(sb.CreatedAt).Round(time.Second) != time.Minute {
			t.Errorf("restored %+v, want it running from %s for a minute", sb, snap)
		}
	}

	// -timeout is warren's: sleep is killed only when given one.
	code, stdout, stderr = runCLI(t, nil, "exec", id, "--timeout", "1s", "--", "sleep", "100")
	if code != 124 || stdout != "" || stderr != "warren: command timed out after 1s\n" {
		t.Errorf("exec ID --timeout 1s -- sleep: exit %d stdout %q stderr %q, want 124 and the timeout", code, stdout, stderr)
	}
}

// TestExecAfterDoubleDash: everything after "--" is the command's, flags,
// "--" and all.
func TestExecAfterDoubleDash(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	tests := []struct {
		args   []string
		stdout string
	}{
		{[]string{"exec", id, "--", "echo", "--timeout", "5s", "-i"}, "--timeout 5s -i\n"},
		{[]string{"exec", id, "--", "echo", "--", "x"}, "-- x\n"},
		{[]string{"exec", "--", id, "printf", "%s\\n", "-n"}, "-n\n"},
		{[]string{"exec", id, "-i", "--", "echo", "-i"}, "-i\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tt.args...)
			if code != 0 || stdout != tt.stdout {
				t.Errorf("exit %d stdout %q stderr %q, want 0 and %q", code, stdout, stderr, tt.stdout)
			}
		})
	}
	// Without "--", the command's flags are taken for warren's: a clear
	// error and the usage, never a command run with flags missing.
	code, stdout, stderr := runCLI(t, nil, "exec", id, "echo", "-n", "x")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "flag provided but not defined: -n") || !strings.Contains(stderr, "usage: warren exec") {
		t.Errorf("exec ID echo -n x: exit %d stdout %q stderr %q, want 2, the bad flag and the usage", code, stdout, stderr)
	}
}
