package api

import (
	"slices"
	"testing"
)

// TestParseEventKinds: kinds and families read as the kinds they name,
// in order; anything else is a bad request naming it.
func TestParseEventKinds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{"", nil, false},
		{" , ", nil, false},
		{"sandbox.failed", []string{EventSandboxFailed}, false},
		{"snapshot, sandbox.expired", []string{EventSnapshotPending, EventSnapshotDurable, EventSnapshotFailed, EventSnapshotDeleted, EventSandboxExpired}, false},
		{"node", []string{EventNodeJoined, EventNodeState, EventNodeFenced}, false},
		{"sandbox.exploded", nil, true},
		{"sand", nil, true},
		{"events.lost", nil, true},
	} {
		got, err := ParseEventKinds(c.in)
		if c.bad {
			if !IsCode(err, CodeBadRequest) {
				t.Errorf("%q: %v, %v; want a bad request", c.in, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}
