//go:build linux

package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	filesystempb "warren/internal/agent/pb/filesystem"
)

// The bounds of directory watches, which a tenant opens at will.
const (
	// maxWatchers bounds the watchers of the agent at once, WatchDir
	// streams and polling watchers together: each holds an inotify
	// instance, of which the kernel allows 128 per user by default.
	maxWatchers = 64
	// maxBufferedEvents bounds the events a polling watcher keeps until
	// they are taken. The first event past it ends the watch: the next
	// GetWatcherEvents answers those kept, every later one
	// ResourceExhausted, until RemoveWatcher.
	maxBufferedEvents = 10_000
	// watcherIdle is how long a polling watcher lives without a
	// GetWatcherEvents: it is then removed as RemoveWatcher would.
	watcherIdle = 10 * time.Minute
	// keepAliveHeader is the header in which the E2B SDK asks for a
	// keep-alive every so many seconds on a stream.
	keepAliveHeader = "Keepalive-Ping-Interval"
)

// watchTable holds the agent's watchers.
type watchTable struct {
	mu      sync.Mutex // guards the fields below
	open    int        // watchers open: streams and polling ones
	polling map[string]*pollWatcher
	closed  bool
}

func newWatchTable() *watchTable {
	return &watchTable{polling: make(map[string]*pollWatcher)}
}

// acquire takes one of the maxWatchers slots; release gives it back.
func (t *watchTable) acquire() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return connect.NewError(connect.CodeUnavailable, errors.New("the agent is closing"))
	}
	if t.open >= maxWatchers {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("more than %d directory watchers", maxWatchers))
	}
	t.open++
	return nil
}

func (t *watchTable) release() {
	t.mu.Lock()
	t.open--
	t.mu.Unlock()
}

// remove ends the polling watcher id, and says whether there was one.
func (t *watchTable) remove(id string) bool {
	t.mu.Lock()
	w, ok := t.polling[id]
	delete(t.polling, id)
	t.mu.Unlock()
	if ok {
		w.stop()
		t.release()
	}
	return ok
}

// closeAll ends every polling watcher and refuses new watchers.
func (t *watchTable) closeAll() {
	t.mu.Lock()
	t.closed = true
	ids := make([]string, 0, len(t.polling))
	for id := range t.polling {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	for _, id := range ids {
		t.remove(id)
	}
}

// pollWatcher is a watch whose events wait, buffered, to be taken by
// GetWatcherEvents. Its reading goroutine ends when it is stopped, or its
// watch ends.
type pollWatcher struct {
	tree *inotifyTree
	idle *time.Timer   // removes it after watcherIdle without a poll
	done chan struct{} // closed when the reading goroutine returned

	mu     sync.Mutex // guards the fields below
	events []*filesystempb.FilesystemEvent
	err    error // why the watch ended early, answered once events are taken
}

// read buffers the tree's events until it ends.
func (w *pollWatcher) read(s *Server, includeEntry bool) {
	defer close(w.done)
	for {
		changes, err := w.tree.next()
		w.mu.Lock()
		for _, c := range changes {
			if len(w.events) == maxBufferedEvents {
				err = connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %s: more than %d events not taken, events were lost", w.tree.root, maxBufferedEvents))
				break
			}
			w.events = append(w.events, s.watchEvent(c, includeEntry))
		}
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
			w.err = err
		}
		w.mu.Unlock()
		if err != nil {
			w.tree.Close()
			return
		}
	}
}

// stop ends the watch and waits for its reading goroutine.
func (w *pollWatcher) stop() {
	w.idle.Stop()
	w.tree.Close()
	<-w.done
}

// watchEvent is the event of a change, with the entry it names when asked
// and it still exists.
func (s *Server) watchEvent(c change, includeEntry bool) *filesystempb.FilesystemEvent {
	ev := &filesystempb.FilesystemEvent{Name: c.name, Type: c.op}
	if includeEntry {
		if fi, err := os.Lstat(c.path); err == nil {
			ev.Entry = s.entryInfo(c.path, fi)
		}
	}
	return ev
}

// openWatch takes a watcher slot and watches the directory p names for the
// caller. The caller closes the tree and releases the slot.
func (h fsService) openWatch(hdr http.Header, p string, recursive, allowNetwork bool) (*inotifyTree, error) {
	acc, err := h.s.caller(hdr)
	if err != nil {
		return nil, err
	}
	root, err := resolvePath(p, acc.home)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fsError("watch", root, err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s not a directory", root))
	}
	if !allowNetwork {
		fs, err := h.s.networkMount(root)
		if err != nil {
			return nil, fsError("watch", root, err)
		}
		if fs != "" {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cannot watch path on network filesystem: %s (%s)", root, fs))
		}
	}
	if err := h.s.watches.acquire(); err != nil {
		return nil, err
	}
	tree, err := openTree(root, recursive)
	if err != nil {
		h.s.watches.release()
		return nil, err
	}
	return tree, nil
}

// WatchDir streams a start event once the directory is watched, then its
// changes, with a keep-alive after each quiet interval (the
// Keepalive-Ping-Interval header's seconds, or Options.KeepAlive). The
// stream ends when the call does, when the watched directory is gone (with
// no error), or with the error that ended the watch.
func (h fsService) WatchDir(ctx context.Context, req *connect.Request[filesystempb.WatchDirRequest], stream *connect.ServerStream[filesystempb.WatchDirResponse]) error {
	m := req.Msg
	tree, err := h.openWatch(req.Header(), m.GetPath(), m.GetRecursive(), m.GetAllowNetworkMounts())
	if err != nil {
		return err
	}
	defer h.s.watches.release()
	type batch struct {
		changes []change
		err     error
	}
	batches := make(chan batch)
	quit := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			changes, err := tree.next()
			select {
			case batches <- batch{changes, err}:
			case <-quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// The inotify instance is closed, and its reader gone, when the
	// handler returns.
	defer func() {
		close(quit)
		tree.Close()
		<-readerDone
	}()

	send := func(r *filesystempb.WatchDirResponse) error {
		if err := stream.Send(r); err != nil {
			return connect.NewError(connect.CodeUnknown, fmt.Errorf("send watch event: %w", err))
		}
		return nil
	}
	if err := send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Start{Start: &filesystempb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	every := keepAliveInterval(req.Header(), h.s.opts.KeepAlive)
	idle := time.NewTimer(every)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-idle.C:
			if err := send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Keepalive{Keepalive: &filesystempb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			idle.Reset(every)
		case b := <-batches:
			for _, c := range b.changes {
				ev := h.s.watchEvent(c, m.GetIncludeEntry())
				if err := send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
					return err
				}
			}
			if len(b.changes) > 0 {
				idle.Reset(every)
			}
			switch {
			case b.err == nil:
			case errors.Is(b.err, io.EOF):
				return nil
			default:
				return b.err
			}
		}
	}
}

// keepAliveInterval is the interval the header asks for, in whole seconds
// from 1 to 3600, or def.
func keepAliveInterval(h http.Header, def time.Duration) time.Duration {
	secs, err := strconv.Atoi(h.Get(keepAliveHeader))
	if err != nil || secs < 1 || secs > 3600 {
		return def
	}
	return time.Duration(secs) * time.Second
}

// CreateWatcher watches a directory for polling, within the bounds above.
func (h fsService) CreateWatcher(ctx context.Context, req *connect.Request[filesystempb.CreateWatcherRequest]) (*connect.Response[filesystempb.CreateWatcherResponse], error) {
	m := req.Msg
	tree, err := h.openWatch(req.Header(), m.GetPath(), m.GetRecursive(), m.GetAllowNetworkMounts())
	if err != nil {
		return nil, err
	}
	id := "w" + rand.Text()
	w := &pollWatcher{tree: tree, done: make(chan struct{})}
	t := h.s.watches
	w.idle = time.AfterFunc(watcherIdle, func() { t.remove(id) })
	go w.read(h.s, m.GetIncludeEntry())
	t.mu.Lock()
	closed := t.closed
	if !closed {
		t.polling[id] = w
	}
	t.mu.Unlock()
	if closed {
		w.stop()
		t.release()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the agent is closing"))
	}
	return connect.NewResponse(&filesystempb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents takes the events buffered since the last call. Once
// the watch ended early (see maxBufferedEvents) and its events are taken,
// it answers the error that ended it.
func (h fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystempb.GetWatcherEventsRequest]) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
	id := req.Msg.GetWatcherId()
	t := h.s.watches
	t.mu.Lock()
	w, ok := t.polling[id]
	t.mu.Unlock()
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", id))
	}
	w.idle.Reset(watcherIdle)
	w.mu.Lock()
	events, err := w.events, w.err
	w.events = nil
	w.mu.Unlock()
	if len(events) == 0 && err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher ends a polling watcher; NotFound if there is none by the
// ID (removed, or idle past watcherIdle).
func (h fsService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystempb.RemoveWatcherRequest]) (*connect.Response[filesystempb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	if !h.s.watches.remove(id) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", id))
	}
	return connect.NewResponse(&filesystempb.RemoveWatcherResponse{}), nil
}
