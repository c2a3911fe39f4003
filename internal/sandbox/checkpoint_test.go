package sandbox

import (
	"testing"
	"time"
)

// TestCheckpointsDue: a checkpoint is due a period after the last one, for
// a sandbox with a policy that is not paused, being deleted or already
// checkpointing, and no more than checkpointsAtOnce run at once.
func TestCheckpointsDue(t *testing.T) {
	now := time.Now()
	m := &Manager{live: map[string]*live{
		"due":      {every: time.Minute, checkpointed: now.Add(-time.Minute)},
		"early":    {every: time.Minute, checkpointed: now.Add(-59 * time.Second)},
		"none":     {checkpointed: now.Add(-time.Hour)},
		"paused":   {every: time.Minute, checkpointed: now.Add(-time.Hour), paused: true},
		"deleting": {every: time.Minute, checkpointed: now.Add(-time.Hour), deleting: true},
	}}
	due := m.checkpointsDue(now)
	if len(due) != 1 || due["due"] == nil || !m.live["due"].checkpointing {
		t.Fatalf("due: %v", due)
	}
	if again := m.checkpointsDue(now); len(again) != 0 {
		t.Errorf("due again while the first runs: %v", again)
	}
	for _, id := range []string{"a", "b", "c"} {
		m.live[id] = &live{every: time.Minute, checkpointed: now.Add(-time.Hour)}
	}
	if more := m.checkpointsDue(now); len(more) != checkpointsAtOnce-1 {
		t.Errorf("%d more started with one under way; want %d (checkpointsAtOnce %d)", len(more), checkpointsAtOnce-1, checkpointsAtOnce)
	}
}
