package e2e

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

// TestEvents: the real daemon records a sandbox's life as events, the
// reaper's end of it as an expiry; another tenant's stream does not carry
// them.
func TestEvents(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := shared.client()
	// The position to follow from is taken before the create: the store of
	// the suite's data directory holds earlier runs' events, and may have
	// trimmed them.
	from := eventsNow(ctx, t, c)
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{TimeoutSeconds: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), sb.ID) })
	var kinds []string
	end := errors.New("ended")
	err = c.Events(ctx, api.EventsRequest{Sandbox: sb.ID, After: &from}, func(e api.Event) error {
		kinds = append(kinds, e.Kind)
		if e.Kind == api.EventSandboxExpired {
			if e.State != api.StateStopped || e.Reason == "" {
				t.Errorf("expiry %+v: want stopped, with its reason", e)
			}
			return end
		}
		return nil
	})
	if !errors.Is(err, end) {
		t.Fatalf("events of %s: %v (got %q)", sb.ID, err, kinds)
	}
	if want := []string{api.EventSandboxCreated, api.EventSandboxRunning, api.EventSandboxExpired}; !slices.Equal(kinds, want) {
		t.Errorf("events of %s: %q, want %q", sb.ID, kinds, want)
	}

	// Another tenant, following its own stream (its positions count only
	// its own events: it has no position before the create to start
	// from), sees nothing of the sandbox.
	other := tenantClient(t, "events-other")
	ofrom := eventsNow(ctx, t, other)
	octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
	defer ocancel()
	err = other.Events(octx, api.EventsRequest{Sandbox: sb.ID, After: &ofrom}, func(e api.Event) error {
		t.Errorf("another tenant sees %+v", e)
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("another tenant's stream: %v, want it to run on, empty, until its deadline", err)
	}
}

// eventsNow returns the position of c's events stream now: the events of
// what happens next come after it.
func eventsNow(ctx context.Context, t *testing.T, c *client.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var at int64
	err := c.EventsOpened(ctx, api.EventsRequest{}, func(after int64) {
		at = after
		cancel()
	}, func(api.Event) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("events position: %v", err)
	}
	return at
}
