package main

import (
	"context"
	"sync"
	"time"

	"warren/api"
	"warren/client"
)

// eventsOpenWait is how long a command waits for the events stream to open
// before it makes its call anyway: progress never holds up the work long.
const eventsOpenWait = time.Second

// followDuring follows the events req selects while a call runs, for p:
// it opens the stream and waits until it has opened (at most
// eventsOpenWait), so that the events of the call that follows come after
// the stream's start, and returns stop, which ends the stream and waits
// for its goroutine. fn gets each event, on that goroutine. When the
// stream cannot be followed (an old server answers 404), lost is called,
// once, on that goroutine too. With p nil there is nothing to show:
// followDuring opens nothing.
func followDuring(ctx context.Context, cl *client.Client, p *progress, req api.EventsRequest, fn func(api.Event), lost func()) (stop func()) {
	if p == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	opened, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		err := cl.EventsOpened(ctx, req, func(int64) { once.Do(func() { close(opened) }) }, func(e api.Event) error {
			fn(e)
			return nil
		})
		if ctx.Err() == nil && err != nil {
			lost()
		}
	}()
	t := time.NewTimer(eventsOpenWait)
	defer t.Stop()
	select {
	case <-opened:
	case <-done:
	case <-t.C:
	}
	return func() {
		cancel()
		<-done
	}
}

// countStarted follows, for p, the sandboxes that a restore of snapshot
// starts: p counts each sandbox.restored event from that snapshot. Several
// restores of the same snapshot at once count each other's sandboxes too:
// the count is only progress. When the stream cannot be followed, p
// becomes a spinner. stop ends it.
func countStarted(ctx context.Context, cl *client.Client, p *progress, snapshot string) (stop func()) {
	req := api.EventsRequest{Snapshot: snapshot, Kinds: []string{api.EventSandboxRestored}}
	return followDuring(ctx, cl, p, req, func(e api.Event) {
		if e.Kind == api.EventSandboxRestored && e.Snapshot == snapshot {
			p.add(1)
		}
	}, func() { p.setTotal(-1) })
}

// countForked follows, for p, the children that a fork of parent starts:
// the fork's snapshot is the first snapshot.pending of parent after the
// stream opens, and p counts each sandbox.restored event from it. Two forks
// (or a snapshot and a fork) of one parent at once may mistake each
// other's snapshot: the count is only progress. When the stream cannot be
// followed, p becomes a spinner. stop ends it.
func countForked(ctx context.Context, cl *client.Client, p *progress, parent string) (stop func()) {
	req := api.EventsRequest{Kinds: []string{api.EventSnapshotPending, api.EventSandboxRestored}}
	snapshot := "" // owned by the stream's goroutine
	return followDuring(ctx, cl, p, req, func(e api.Event) {
		switch {
		case e.Kind == api.EventSnapshotPending && e.Sandbox == parent && snapshot == "":
			snapshot = e.Snapshot
			p.setStatus("snapshot " + snapshot)
		case e.Kind == api.EventSandboxRestored && snapshot != "" && e.Snapshot == snapshot:
			p.add(1)
		}
	}, func() { p.setTotal(-1) })
}

// watchSnapshot follows, for p, the snapshot of sandbox being taken: p's
// status says when its disk is cloned and it is uploading. A snapshot of
// the same sandbox taken at once by someone else may show instead: it is
// only progress. stop ends it.
func watchSnapshot(ctx context.Context, cl *client.Client, p *progress, sandbox string) (stop func()) {
	p.setStatus("cloning the disk")
	req := api.EventsRequest{Sandbox: sandbox, Kinds: []string{api.EventSnapshotPending}}
	seen := false // owned by the stream's goroutine
	return followDuring(ctx, cl, p, req, func(e api.Event) {
		if e.Kind == api.EventSnapshotPending && e.Sandbox == sandbox && !seen {
			seen = true
			p.setStatus(e.Snapshot + " pending: uploading to the blob store")
		}
	}, func() { p.setStatus("") })
}
