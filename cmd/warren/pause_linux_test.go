package main

import (
	"strings"
	"testing"

	"warren/api"
)

// TestPauseResume: the in-process runtime pauses (its agent stops; unlike a
// vm it does not keep the processes): exec is refused while paused and
// works again after resume.
func TestPauseResume(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	if code, stdout, stderr := runCLI(t, nil, "pause", id); code != 0 || stdout != "paused\n" {
		t.Fatalf("pause: exit %d stdout %q stderr %q, want paused", code, stdout, stderr)
	}
	if st := w.get(id).State; st != api.StatePaused {
		t.Errorf("after pause: %s", st)
	}
	if code, _, stderr := runCLI(t, nil, "exec", id, "--", "true"); code != 1 || !strings.Contains(stderr, "paused") {
		t.Errorf("exec in a paused sandbox: exit %d stderr %q, want a refusal saying it is paused", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "pause", id); code != 1 || stderr == "" {
		t.Errorf("pause of a paused sandbox: exit %d stderr %q, want a refusal", code, stderr)
	}
	if code, stdout, stderr := runCLI(t, nil, "resume", id); code != 0 || stdout != "running\n" {
		t.Fatalf("resume: exit %d stdout %q stderr %q, want running", code, stdout, stderr)
	}
	if code, stdout, _ := runCLI(t, nil, "exec", id, "--", "echo", "back"); code != 0 || stdout != "back\n" {
		t.Errorf("exec after resume: exit %d stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "resume", id); code != 1 || stderr == "" {
		t.Errorf("resume of a running sandbox: exit %d stderr %q, want a refusal", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "pause"); code != 2 || !strings.Contains(stderr, "usage: warren pause") {
		t.Errorf("pause without an ID: exit %d stderr %q", code, stderr)
	}
}
