// Package client is the Go client of warren's HTTP API (docs/API.md): the
// warren CLI uses it, and Go harnesses can import it to create sandboxes, run
// commands in them and move files in and out.
//
// A Client holds only its configuration and one http.Client, so it is safe
// for concurrent use and reuses connections across calls. Calls that are safe
// to repeat are retried with a bounded backoff; calls with effects (exec,
// create, stdin, file upload) are sent once. Error answers of the server are
// returned as *api.Error, wrapped, so that errors.As and api.IsCode work.
//
// Paths inside a sandbox are absolute, or relative to the user's home; a path
// that climbs above / is refused by the server (bad_request).
//
// It is not the E2B-compatible SDK layer, and it does not speak the guest
// agent's protocol: it talks to the warren server only.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"warren/api"
)

// Client talks to one warren server. Its methods take a context first; the
// context alone bounds a call (there is no global timeout, so a stream can
// last as long as its process).
type Client struct {
	base    string // scheme://host[:port][/prefix], without a trailing slash
	key     string
	hc      *http.Client
	tries   int           // attempts of a retryable call, the first included
	backoff time.Duration // delay before the first retry; it doubles each time
}

// Option configures a Client made by New.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through hc instead of
// its own http.Client. hc should have no Timeout, which would cut streams.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithRetry sets how many times a call that is safe to repeat is attempted
// (1 disables retries) and the delay before the first retry, which doubles
// after each attempt up to 16 times itself. The default is 5 attempts from
// 100ms.
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(c *Client) {
		c.tries = max(attempts, 1)
		c.backoff = max(backoff, 0)
	}
}

// New returns a Client of the server at baseURL (e.g. http://127.0.0.1:7777)
// that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64 // a harness runs many calls at once against one server
	c := &Client{
		base: strings.TrimRight(baseURL, "/"),
		key:  apiKey,
		hc: &http.Client{
			Transport: t,
			// The API never redirects; following one would turn a POST
			// into a GET. A 3xx is reported as an error instead.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		tries:   5,
		backoff: 100 * time.Millisecond,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// call is one API call: what to send and how it may be repeated.
type call struct {
	op     string // what the call does, prefixed to its errors
	method string
	path   string // escaped, under the base URL; empty when an ID was empty
	query  url.Values
	in     any       // the JSON request body, or nil
	body   io.Reader // a streamed request body, or nil; it cannot be sent twice
	retry  retryClass
	// goneIsDone makes a 404 a success after an attempt whose outcome is
	// unknown: that attempt did what the call asked (a repeated DELETE).
	goneIsDone bool
	// idempotencyKey, when set, is sent with every attempt: the server
	// answers a repeat with the first attempt's answer.
	idempotencyKey string
}

// send sends cl, repeating it as its retry class allows, and returns the
// response of a 2xx answer; any other answer becomes an *api.Error.
func (c *Client) send(ctx context.Context, cl *call) (*http.Response, error) {
	if cl.path == "" {
		return nil, fmt.Errorf("%s: empty sandbox ID", cl.op)
	}
	var payload []byte
	if cl.in != nil {
		var err error
		if payload, err = json.Marshal(cl.in); err != nil {
			return nil, fmt.Errorf("%s: encode request: %w", cl.op, err)
		}
	}
	tries := 1
	if cl.retry != retryNever && cl.body == nil {
		tries = c.tries
	}
	unknown := false // an earlier attempt may have reached the server
	waits := c.waits()
	for attempt := 1; ; attempt++ {
		req, err := c.newRequest(ctx, cl, payload)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cl.op, err)
		}
		resp, err := c.hc.Do(req)
		status := 0
		if err == nil {
			status = resp.StatusCode
			if status/100 == 2 {
				return resp, nil
			}
			if status == http.StatusNotFound && cl.goneIsDone && unknown {
				return resp, nil
			}
			err = decodeError(resp)
		}
		if attempt >= tries || !cl.retry.allows(status, err) {
			return nil, fmt.Errorf("%s: %w", cl.op, err)
		}
		unknown = unknown || (status == 0 && !refused(err))
		if !waits.Wait(ctx.Done()) {
			return nil, fmt.Errorf("%s: %w", cl.op, ctx.Err())
		}
	}
}

func (c *Client) newRequest(ctx context.Context, cl *call, payload []byte) (*http.Request, error) {
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var body io.Reader
	switch {
	case payload != nil:
		body = bytes.NewReader(payload)
	case cl.body != nil:
		body = cl.body
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, body)
	if err != nil {
		return nil, err
	}
	switch {
	case payload != nil:
		req.Header.Set("Content-Type", "application/json")
	case cl.body != nil:
		req.Header.Set("Content-Type", "application/octet-stream")
		// The transport closes the request body; the caller's reader (say,
		// os.Stdin) stays the caller's to close.
		if _, ok := cl.body.(io.Closer); ok {
			req.Body = io.NopCloser(cl.body)
		}
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if cl.idempotencyKey != "" {
		req.Header.Set(api.IdempotencyKeyHeader, cl.idempotencyKey)
	}
	return req, nil
}

// do sends cl and decodes the JSON answer into out; a nil out discards it.
func (c *Client) do(ctx context.Context, cl *call, out any) error {
	resp, err := c.send(ctx, cl)
	if err != nil {
		return err
	}
	defer drain(resp)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", cl.op, err)
	}
	return nil
}

// drain reads what is left of a small answer and closes it, so that its
// connection can carry the next call.
func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// errorCodes are the codes an answer without a JSON error body is mapped
// to, by the HTTP status each is sent with.
var errorCodes = []string{
	api.CodeBadRequest, api.CodeUnauthorized, api.CodeForbidden, api.CodeNotFound,
	api.CodeConflict, api.CodeTooLarge, api.CodeTimeout, api.CodeUnavailable,
	api.CodeInternal, api.CodeMethodNotAllowed,
}

// decodeError reads an error answer into an *api.Error and closes it. A body
// that is not warren's error JSON (a proxy's page, say) gets the code of its
// status — or unavailable for another 5xx, bad_request for anything else —
// and the status text as its message.
func decodeError(resp *http.Response) error {
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.ErrorBody
	if json.Unmarshal(data, &body) == nil && body.Error.Code != "" {
		e := body.Error
		if e.Message == "" {
			e.Message = statusText(resp.StatusCode)
		}
		return &e
	}
	code := api.CodeBadRequest
	if resp.StatusCode >= 500 {
		code = api.CodeUnavailable
	}
	for _, c := range errorCodes {
		if (&api.Error{Code: c}).Status() == resp.StatusCode {
			code = c
			break
		}
	}
	return &api.Error{Code: code, Message: statusText(resp.StatusCode)}
}

func statusText(status int) string {
	return strings.TrimSpace(fmt.Sprintf("%d %s", status, http.StatusText(status)))
}

// sandboxPath is the escaped path of a sandbox's route: /v1/sandboxes/ID
// followed by elems. An empty ID gives an empty path, which send refuses
// before anything is sent.
func sandboxPath(id string, elems ...string) string {
	return idPath("sandboxes", id, elems...)
}

func nodePath(id string, elems ...string) string {
	return idPath("nodes", id, elems...)
}

// idPath is the escaped path of the resource id in collection, and of elems
// under it; "" when id is empty.
func idPath(collection, id string, elems ...string) string {
	if id == "" {
		return ""
	}
	p := "/v1/" + collection + "/" + url.PathEscape(id)
	for _, e := range elems {
		p += "/" + url.PathEscape(e)
	}
	return p
}
