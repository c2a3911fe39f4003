package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Regression: the daemon grouped each subsystem's logger, so a sandbox's ID
// came out as sandbox.sandbox=, network.sandbox= or vm.vm=, and no one key
// found a sandbox's lines.
func TestSubsystemLogKeys(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	subsystem(log, "vm").With("sandbox", "sb-1").Info("started", "pid", 7)
	got := strings.TrimSpace(buf.String())
	if want := "level=INFO msg=started subsystem=vm sandbox=sb-1 pid=7"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
