package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/sandbox/sandboxtest"
	"warren/internal/server"
	"warren/internal/store"
)

// follow runs warren events with args until the test ends or stop is
// called, and returns its lines as they come, and its exit status once it
// is stopped.
func follow(t *testing.T, args ...string) (lines <-chan string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r, w := io.Pipe()
	out := make(chan string, 100)
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"events"}, args...), strings.NewReader(""), w, io.Discard)
		w.Close()
	}()
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	return out, func() int {
		cancel()
		for range out {
		}
		return <-code
	}
}

// next reads the next event from lines (JSON), failing after 10 s.
func next(t *testing.T, lines <-chan string) api.Event {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("the events stream ended")
		}
		var e api.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("event line %q: %v", l, err)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	panic("unreachable")
}

// TestEventsCommand: warren events follows the tenant's sandboxes and
// snapshots as they change, in order, none of another tenant's; it goes on
// after its connection is cut without losing or repeating an event; its
// filters select; bad ones are usage errors.
func TestEventsCommand(t *testing.T) {
	w := newWarren(t)
	ctx := context.Background()
	if _, err := w.Manager.Create(ctx, "other", api.CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	lines, stop := follow(t, "--json", "--after", "0")
	expect := func(kind, sandbox string) api.Event {
		t.Helper()
		e := next(t, lines)
		if e.Kind != kind || (sandbox != "" && e.Sandbox != sandbox) || e.Tenant != tenant {
			t.Fatalf("event %+v, want %s of %s (tenant %s)", e, kind, sandbox, tenant)
		}
		return e
	}
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	first := expect(api.EventSandboxCreated, id)
	expect(api.EventSandboxRunning, id)
	if _, err := w.Manager.Pause(ctx, tenant, id); err != nil {
		t.Fatal(err)
	}
	// A pause is durable: its disk snapshot first.
	expect(api.EventSnapshotPending, id)
	expect(api.EventSnapshotDurable, id)
	expect(api.EventSandboxPaused, id)

	w.hs.CloseClientConnections() // the stream goes on from where it was
	if _, err := w.Manager.Resume(ctx, tenant, id); err != nil {
		t.Fatal(err)
	}
	expect(api.EventSandboxResumed, id)
	sn, err := w.Manager.Snapshot(ctx, tenant, id, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if e := expect(api.EventSnapshotPending, id); e.Snapshot != sn.ID {
		t.Errorf("snapshot event %+v, want %s", e, sn.ID)
	}
	expect(api.EventSnapshotDurable, id)
	kids, err := w.Manager.Restore(ctx, tenant, sn.ID, api.RestoreRequest{})
	if err != nil {
		t.Fatal(err)
	}
	expect(api.EventSandboxCreated, kids[0].ID)
	if e := expect(api.EventSandboxRestored, kids[0].ID); e.Snapshot != sn.ID {
		t.Errorf("restored event %+v, want it from %s", e, sn.ID)
	}
	if err := w.Manager.Delete(ctx, tenant, id); err != nil {
		t.Fatal(err)
	}
	if e := expect(api.EventSandboxDeleted, id); e.ID <= first.ID || e.State != api.StateStopped {
		t.Errorf("deleted event %+v after %d", e, first.ID)
	}
	if code := stop(); code != 0 {
		t.Errorf("events stopped with exit %d, want 0", code)
	}

	lines, stop = follow(t, "--after", "0", "--sandbox", id, "--kind", "sandbox.paused,snapshot")
	for _, want := range []string{"snapshot.pending", "snapshot.durable", "sandbox.paused", "snapshot.pending", "snapshot.durable"} {
		select {
		case l := <-lines:
			if f := strings.Split(l, "\t"); len(f) != 7 || f[2] != want || f[3] != id {
				t.Errorf("filtered line %q, want %s of %s", l, want, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s line", want)
		}
	}
	stop()

	for _, args := range [][]string{{"--kind", "sandbox.exploded"}, {"--after", "-1"}, {"extra"}} {
		if code, _, stderr := runCLI(t, nil, append([]string{"events"}, args...)...); code != 2 || !strings.Contains(stderr, "usage: warren events") {
			t.Errorf("events %q: exit %d, stderr %q; want a usage error", args, code, stderr)
		}
	}
}

// TestEventsStream: the stream's own answers: its first message says
// where it starts; it resumes from Last-Event-ID before ?after=; a resume
// from events trimmed away, or from an ID the server never gave, starts
// with an events.lost message; bad filters and all_tenants without an
// admin key are refused; a tenant's open streams are bounded.
func TestEventsStream(t *testing.T) {
	w := newWarren(t)
	ctx := context.Background()
	ids := []string{w.sandbox(api.CreateSandboxRequest{}).ID, w.sandbox(api.CreateSandboxRequest{}).ID}
	open := func(query, lastID, key string) (*http.Response, *bufio.Reader) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", w.url+"/v1/events"+query, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp, bufio.NewReader(resp.Body)
	}
	// message reads one message of the stream: its lines.
	message := func(br *bufio.Reader) []string {
		t.Helper()
		var lines []string
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("read the stream: %v (so far %q)", err, lines)
			}
			if l = strings.TrimSuffix(l, "\n"); l == "" {
				return lines
			}
			lines = append(lines, l)
		}
	}
	_, newest, err := w.Deps.Store.EventBounds(ctx, tenant)
	if err != nil || newest < 4 {
		t.Fatalf("event bounds: %d, %v", newest, err)
	}
	resp, br := open("", "", w.key)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("stream: %d %q", resp.StatusCode, ct)
	}
	if got := message(br); len(got) != 2 || got[0] != "retry: 2000" || got[1] != "id: "+strconv.FormatInt(newest, 10) {
		t.Errorf("first message from now: %q, want the retry and id %d", got, newest)
	}
	_, br = open("?after=1", "2", w.key)
	message(br)
	if got := message(br); len(got) != 3 || got[0] != "id: 3" || got[1] != "event: "+api.EventSandboxCreated || !strings.Contains(got[2], ids[1]) {
		t.Errorf("resumed after Last-Event-ID 2: %q, want event 3, the second sandbox's creation", got)
	}

	if _, err := w.Deps.Store.TrimEvents(ctx, time.Now().Add(-time.Hour), 1); err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"1", "999999"} {
		_, br = open("?after="+from, "", w.key)
		message(br)
		got := message(br)
		if len(got) != 2 || got[0] != "event: "+api.EventsLost || !strings.Contains(got[1], `"after":`+from) {
			t.Errorf("resumed after %s: %q, want an events.lost message first", from, got)
		}
	}

	for _, c := range []struct {
		query string
		key   string
		code  int
	}{
		{"?kind=sandbox.exploded", w.key, 400},
		{"?after=x", w.key, 400},
		{"?sandbox=" + strings.Repeat("x", 65), w.key, 400},
		{"?all_tenants=true", w.key, 403},
		{"?all_tenants=true", w.admin, 200},
	} {
		if resp, _ := open(c.query, "", c.key); resp.StatusCode != c.code {
			t.Errorf("%s: %d, want %d", c.query, resp.StatusCode, c.code)
		}
	}
	var held []*http.Response
	for range server.DefaultEventStreamsPerTenant + 1 {
		resp, _ := open("", "", w.key)
		held = append(held, resp)
	}
	if last := held[len(held)-1]; last.StatusCode != http.StatusTooManyRequests {
		t.Errorf("stream %d of the tenant: %d, want 429", len(held), last.StatusCode)
	}
}

// BenchmarkEventsFanout: how many events a second the server delivers to
// subscribers that follow all of one tenant's, over HTTP, from a real
// store: b.N sandboxes are recorded and moved to running in the store (two
// events each) while they follow, and the time runs until every
// subscriber has read every event. One subscriber is the baseline of 100
// (docs/BENCHMARKS.md).
func BenchmarkEventsFanout(b *testing.B) {
	for _, subs := range []int{1, 100} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			w := newWarrenWith(b, sandboxtest.New(b), server.Options{Limits: server.Limits{EventStreamsPerTenant: subs}})
			cl := client.New(w.url, w.key)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, newest, err := w.Deps.Store.EventBounds(ctx, tenant)
			if err != nil {
				b.Fatal(err)
			}
			want := 2 * b.N
			all := errors.New("all read")
			var wg sync.WaitGroup
			b.ResetTimer()
			for range subs {
				wg.Go(func() {
					n := 0
					err := cl.Events(ctx, api.EventsRequest{After: &newest}, func(api.Event) error {
						if n++; n == want {
							return all
						}
						return nil
					})
					if !errors.Is(err, all) {
						b.Error(err)
					}
				})
			}
			for i := range b.N {
				id := fmt.Sprintf("sb-bench%d", i)
				if err := w.Deps.Store.InsertSandbox(ctx, &store.Sandbox{ID: id, Tenant: tenant, Template: "default",
					Runtime: "container", State: api.StateStarting, CPUs: 1, MemoryMB: 64, Pids: 64, DiskMB: 64}); err != nil {
					b.Fatal(err)
				}
				if _, err := w.Deps.Store.Transition(ctx, id, store.Transition{From: []string{api.StateStarting}, To: api.StateRunning}); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			b.ReportMetric(float64(want*subs)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
