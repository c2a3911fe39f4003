package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"warren/api"
)

// The events stream's pace: a batch of at most eventBatch events per read;
// a read at least every eventPoll, for the events other processes of a
// fleet record (this process's wake the stream at once); a comment at
// least every eventKeepalive, so that an idle stream is not cut.
const (
	eventBatch     = 256
	eventPoll      = time.Second
	eventKeepalive = 15 * time.Second
	// eventRetryMs is the reconnection delay the stream asks of an
	// EventSource.
	eventRetryMs = 2000
)

// events answers GET /v1/events: the caller's events as server-sent
// events (docs/API.md, "Events"), from the one after Last-Event-ID (or
// ?after=), else from the next one, until the client goes.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Events == nil {
		return api.Errorf(api.CodeNotFound, "this server keeps no events")
	}
	tenant, err := tenantScope(r)
	if err != nil {
		return err
	}
	f, after, err := parseEventsQuery(r)
	if err != nil {
		return err
	}
	f.Tenant, f.Limit = tenant, eventBatch
	release, err := s.eventStreams.acquire(tenant, s.opts.Limits.EventStreamsPerTenant, "events streams of the tenant")
	if err != nil {
		return err
	}
	defer release()
	ctx := r.Context()
	oldest, newest, err := s.opts.Events.Bounds(ctx, tenant)
	if err != nil {
		return err
	}
	f.After = newest
	var lost *api.LostEvents
	if after != nil {
		f.After = *after
		switch {
		case *after > newest:
			// IDs this store never gave: it is not the one the client
			// followed. It goes on from now.
			lost, f.After = &api.LostEvents{Kind: api.EventsLost, After: *after, Oldest: oldest}, newest
		case oldest > 0 && *after < oldest-1:
			lost = &api.LostEvents{Kind: api.EventsLost, After: *after, Oldest: oldest}
		}
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// The first message has no data: it tells the client (an EventSource
	// too) where the stream starts, so that a reconnection before the
	// first event resumes there rather than from a later now.
	if _, err := fmt.Fprintf(w, "retry: %d\nid: %d\n\n", eventRetryMs, f.After); err != nil {
		return nil
	}
	if lost != nil {
		if err := writeEvent(w, 0, api.EventsLost, lost); err != nil {
			return nil
		}
	}
	if err := rc.Flush(); err != nil {
		return nil
	}
	poll := time.NewTicker(eventPoll)
	defer poll.Stop()
	quiet := time.Now()
	for {
		changed := s.opts.Events.Changed()
		evs, err := s.opts.Events.Events(ctx, f)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("events stream: read events", "err", err)
			}
			return nil // the client reconnects with the last ID it got
		}
		for _, e := range evs {
			if err := writeEvent(w, e.ID, e.Kind, e); err != nil {
				return nil
			}
			f.After = e.ID
		}
		if len(evs) > 0 || time.Since(quiet) >= eventKeepalive {
			if len(evs) == 0 {
				if _, err := w.Write([]byte(": keepalive\n\n")); err != nil {
					return nil
				}
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
			quiet = time.Now()
		}
		if len(evs) == eventBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-poll.C:
		}
	}
}

// writeEvent writes one server-sent event: its id (none when 0), its
// kind as the event name, and v as its JSON data.
func writeEvent(w http.ResponseWriter, id int64, kind string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var b []byte
	if id != 0 {
		b = append(b, "id: "...)
		b = strconv.AppendInt(b, id, 10)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, kind...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	_, err = w.Write(b)
	return err
}

// maxEventFilterLen bounds a sandbox or snapshot ID in an events filter.
const maxEventFilterLen = 64

// parseEventsQuery reads the events stream's filters (sandbox, snapshot,
// kind) and where it starts: the Last-Event-ID header, else ?after=, else
// nil (the next event).
func parseEventsQuery(r *http.Request) (EventFilter, *int64, error) {
	q := r.URL.Query()
	f := EventFilter{Sandbox: q.Get("sandbox"), Snapshot: q.Get("snapshot")}
	for _, v := range []struct{ name, id string }{{"sandbox", f.Sandbox}, {"snapshot", f.Snapshot}} {
		if len(v.id) > maxEventFilterLen {
			return f, nil, api.Errorf(api.CodeBadRequest, "%s filter of %d bytes: an ID has at most %d", v.name, len(v.id), maxEventFilterLen)
		}
	}
	kinds, err := api.ParseEventKinds(q.Get("kind"))
	if err != nil {
		return f, nil, err
	}
	f.Kinds = kinds
	from, name := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if from == "" {
		from, name = q.Get("after"), "after"
	}
	if from == "" {
		return f, nil, nil
	}
	after, err := strconv.ParseInt(from, 10, 64)
	if err != nil || after < 0 {
		return f, nil, api.Errorf(api.CodeBadRequest, "%s %q: want an event ID, a number from 0", name, from)
	}
	return f, &after, nil
}
