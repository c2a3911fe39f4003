//go:build linux

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	filesystempb "warren/internal/agent/pb/filesystem"
	"warren/internal/wait"
)

func wantWatchCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if got := connect.CodeOf(err); err == nil || got != code {
		t.Fatalf("error = %v (code %v), want code %v", err, got, code)
	}
}

func TestWatchBounds(t *testing.T) {
	s := New(Options{}, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { s.Close() })
	h := fsService{s}
	ctx := context.Background()
	dir := t.TempDir()

	t.Run("watchers", func(t *testing.T) {
		var ids []string
		for range maxWatchers {
			cw, err := h.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: dir}))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, cw.Msg.GetWatcherId())
		}
		_, err := h.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: dir}))
		wantWatchCode(t, err, connect.CodeResourceExhausted)
		for _, id := range ids {
			if _, err := h.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id})); err != nil {
				t.Fatal(err)
			}
		}
		cw, err := h.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: dir}))
		if err != nil {
			t.Fatalf("a watcher once the others are removed: %v", err)
		}
		h.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: cw.Msg.GetWatcherId()}))
	})

	t.Run("directories", func(t *testing.T) {
		tree := t.TempDir()
		for i := range maxWatchedDirs {
			if err := os.Mkdir(filepath.Join(tree, fmt.Sprint(i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_, err := h.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: tree, Recursive: true}))
		wantWatchCode(t, err, connect.CodeResourceExhausted)
		// Not recursive, the same tree is one watch.
		cw, err := h.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: tree}))
		if err != nil {
			t.Fatal(err)
		}
		h.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: cw.Msg.GetWatcherId()}))
		s.watches.mu.Lock()
		open := s.watches.open
		s.watches.mu.Unlock()
		if open != 0 {
			t.Errorf("%d watcher slots held after the refusals, want 0", open)
		}
	})

	t.Run("buffered events", func(t *testing.T) {
		flood := t.TempDir()
		cw, err := h.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: flood}))
		if err != nil {
			t.Fatal(err)
		}
		id := cw.Msg.GetWatcherId()
		for i := range maxBufferedEvents + 1 {
			f, err := os.Create(filepath.Join(flood, fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		s.watches.mu.Lock()
		w := s.watches.polling[id]
		s.watches.mu.Unlock()
		wait.For(t, 30*time.Second, "the watcher to overflow", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.err != nil
		})
		resp, err := h.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil || len(resp.Msg.GetEvents()) != maxBufferedEvents {
			t.Fatalf("first poll after the overflow: %d events, %v; want %d", len(resp.Msg.GetEvents()), err, maxBufferedEvents)
		}
		_, err = h.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
		wantWatchCode(t, err, connect.CodeResourceExhausted)
		if _, err := h.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
	})
}

func TestUserFromHeader(t *testing.T) {
	for _, tc := range []struct {
		auth, want string
		bad        bool
	}{
		{auth: "", want: ""},
		{auth: "Bearer abc", want: ""},
		{auth: "Basic dXNlcjo=", want: "user"},     // "user:"
		{auth: "basic cm9vdDpwdw==", want: "root"}, // "root:pw"
		{auth: "Basic !!!", bad: true},
		{auth: "Basic dXNlcg==", bad: true}, // "user", no colon
	} {
		h := make(map[string][]string)
		if tc.auth != "" {
			h["Authorization"] = []string{tc.auth}
		}
		got, err := userFromHeader(h)
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("userFromHeader(%q) = %q, %v; want %q, error %v", tc.auth, got, err, tc.want, tc.bad)
		}
	}
}
