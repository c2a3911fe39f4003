package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"warren/api"
)

// maxEventLine bounds a line of the events stream.
const maxEventLine = 1 << 20

// Events follows the events that req selects and the key may see
// (docs/API.md, "Events"), calling fn with each in order, until ctx ends
// (then it returns ctx's error) or fn returns an error (which it returns).
// A stream that is cut is opened again, with backoff, after the last event
// fn got, so fn sees each event once. When the server no longer holds
// the events after that one (they are older than its replay window), fn
// gets an event of kind api.EventsLost, with no ID, whose Reason says
// which. An answer that is an API error (a bad filter, a key that may not)
// ends it at once.
func (c *Client) Events(ctx context.Context, req api.EventsRequest, fn func(api.Event) error) error {
	return c.EventsOpened(ctx, req, nil, fn)
}

// EventsOpened is Events that also calls opened, when it is not nil, each
// time a stream opens, with the position the stream starts after: fn gets
// every event of a change recorded after opened is called. A caller that
// waits for opened before it acts sees the events of its act.
func (c *Client) EventsOpened(ctx context.Context, req api.EventsRequest, opened func(after int64), fn func(api.Event) error) error {
	q := url.Values{}
	for k, v := range map[string]string{"sandbox": req.Sandbox, "snapshot": req.Snapshot, "kind": strings.Join(req.Kinds, ",")} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if req.AllTenants {
		q.Set("all_tenants", "true")
	}
	var last *int64
	if req.After != nil {
		after := *req.After
		last = &after
	}
	waits := c.waits()
	for {
		got, err := c.followEvents(ctx, q, &last, opened, fn)
		var ae *api.Error
		var fe fnError
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &fe):
			return fe.err
		case errors.As(err, &ae) && ae.Status() < 500 && ae.Code != api.CodeTooMany:
			return fmt.Errorf("events: %w", err)
		}
		if got {
			waits.Reset()
		}
		if !waits.Wait(ctx.Done()) {
			return ctx.Err()
		}
	}
}

// fnError is the error of Events's fn, which ends it.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// followEvents reads one events stream after *last (nil: from now),
// moving *last along, until it breaks; got says whether it read anything.
// The stream's first message, an id alone, goes to opened (when not nil).
func (c *Client) followEvents(ctx context.Context, q url.Values, last **int64, opened func(int64), fn func(api.Event) error) (got bool, err error) {
	cl := &call{op: "events", method: http.MethodGet, path: "/v1/events", query: q, retry: retryNever}
	if *last != nil {
		q = maps.Clone(q)
		q.Set("after", strconv.FormatInt(**last, 10))
		cl.query = q
	}
	resp, err := c.send(ctx, cl)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	var id, kind string
	var data bytes.Buffer
	for sc.Scan() {
		got = true
		line := sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if id != "" {
				n, err := strconv.ParseInt(id, 10, 64)
				if err != nil {
					return got, fmt.Errorf("events: bad event ID %q", id)
				}
				*last = &n
				if opened != nil && data.Len() == 0 && kind == "" {
					opened(n)
					opened = nil
				}
			}
			if data.Len() > 0 {
				if err := dispatch(kind, data.Bytes(), fn); err != nil {
					return got, err
				}
			}
			id, kind = "", ""
			data.Reset()
		case field == "id":
			id = value
		case field == "event":
			kind = value
		case field == "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	if err := sc.Err(); err != nil {
		return got, fmt.Errorf("events: %w", err)
	}
	return got, errors.New("events: the stream ended")
}

// dispatch hands the event of kind with data to fn.
func dispatch(kind string, data []byte, fn func(api.Event) error) error {
	var e api.Event
	if kind == api.EventsLost {
		var l api.LostEvents
		if err := json.Unmarshal(data, &l); err != nil {
			return fmt.Errorf("events: decode %s: %w", kind, err)
		}
		e = api.Event{Kind: api.EventsLost, Reason: l.String()}
	} else if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("events: decode %s: %w", kind, err)
	}
	if err := fn(e); err != nil {
		return fnError{err}
	}
	return nil
}
