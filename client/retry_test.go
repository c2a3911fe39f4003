package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"warren/api"
)

// hits counts the requests a handler saw.
type hits struct{ n atomic.Int64 }

func (h *hits) count() int { return int(h.n.Load()) }

// failing answers 503 to the first fail requests, then 200 with answer.
func (h *hits) failing(fail int, answer string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if int(h.n.Add(1)) <= fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":"unavailable","message":"busy"}}`))
			return
		}
		w.Write([]byte(answer))
	})
}

func TestRetryGETOn503(t *testing.T) {
	var h hits
	c := newTestClient(t, h.failing(2, mustJSON(sandbox)))
	sb, err := c.GetSandbox(t.Context(), "sb-1")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if sb.ID != "sb-1" || h.count() != 3 {
		t.Errorf("got %s after %d requests, want sb-1 after 3", sb.ID, h.count())
	}
}

func TestRetryIsBounded(t *testing.T) {
	var h hits
	c := newTestClient(t, h.failing(100, ""))
	_, err := c.ListSandboxes(t.Context())
	if !api.IsCode(err, api.CodeUnavailable) {
		t.Errorf("error %v, want unavailable", err)
	}
	if h.count() != 3 {
		t.Errorf("%d requests, want 3 (the configured attempts)", h.count())
	}
}

// effects lists calls that must reach the server at most once whatever
// happens, and calls that are repeated only when the connection was refused.
var effects = []struct {
	name string
	call func(context.Context, *Client) error
}{
	{"exec", func(ctx context.Context, c *Client) error {
		_, err := c.Exec(ctx, "sb-1", api.ExecRequest{Cmd: []string{"true"}})
		return err
	}},
	{"exec stream", func(ctx context.Context, c *Client) error {
		_, err := c.ExecStream(ctx, "sb-1", api.ExecRequest{Cmd: []string{"true"}})
		return err
	}},
	{"start process", func(ctx context.Context, c *Client) error {
		_, err := c.StartProcess(ctx, "sb-1", api.ExecRequest{Cmd: []string{"true"}})
		return err
	}},
	{"stdin", func(ctx context.Context, c *Client) error {
		return c.WriteStdin(ctx, "sb-1", 7, strings.NewReader("x"), true)
	}},
	{"write file", func(ctx context.Context, c *Client) error {
		_, err := c.WriteFile(ctx, "sb-1", "/f", strings.NewReader("x"), 0, "")
		return err
	}},
}

var refusedOnly = []struct {
	name string
	call func(context.Context, *Client) error
}{
	{"signal", func(ctx context.Context, c *Client) error { return c.SignalProcess(ctx, "sb-1", 7, "KILL") }},
	{"wait", func(ctx context.Context, c *Client) error {
		_, err := c.WaitProcess(ctx, "sb-1", 7, 0)
		return err
	}},
	{"set timeout", func(ctx context.Context, c *Client) error {
		_, err := c.SetTimeout(ctx, "sb-1", time.Hour)
		return err
	}},
	{"mkdir", func(ctx context.Context, c *Client) error {
		_, err := c.Mkdir(ctx, "sb-1", "/d", 0, "")
		return err
	}},
	{"move", func(ctx context.Context, c *Client) error {
		_, err := c.Move(ctx, "sb-1", "/a", "/b")
		return err
	}},
	{"remove file", func(ctx context.Context, c *Client) error { return c.RemoveFile(ctx, "sb-1", "/a", false) }},
	{"set secret", func(ctx context.Context, c *Client) error {
		_, err := c.SetSecret(ctx, "openai", api.SetSecretRequest{Value: "v"})
		return err
	}},
	{"build template", func(ctx context.Context, c *Client) error {
		_, err := c.BuildTemplate(ctx, "py", nil)
		return err
	}},
}

func TestNoRetryOn503ForCallsWithEffects(t *testing.T) {
	for _, tt := range append(effects, refusedOnly...) {
		t.Run(tt.name, func(t *testing.T) {
			var h hits
			c := newTestClient(t, h.failing(1, "{}"))
			if err := tt.call(t.Context(), c); !api.IsCode(err, api.CodeUnavailable) {
				t.Errorf("error %v, want unavailable", err)
			}
			if h.count() != 1 {
				t.Errorf("%d requests, want 1", h.count())
			}
		})
	}
}

// dropFirst answers nothing to the first request: it closes the connection
// after reading it, so the client cannot know whether it took effect.
func dropFirst(h *hits, then http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.n.Add(1) == 1 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		then.ServeHTTP(w, r)
	})
}

func TestRetryGETOnBrokenConnection(t *testing.T) {
	var h hits
	c := newTestClient(t, dropFirst(&h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(mustJSON(sandbox)))
	})))
	if _, err := c.GetSandbox(t.Context(), "sb-1"); err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if h.count() != 2 {
		t.Errorf("%d requests, want 2", h.count())
	}
}

func TestNoRetryOnBrokenConnectionForCallsWithEffects(t *testing.T) {
	for _, tt := range append(effects, refusedOnly...) {
		t.Run(tt.name, func(t *testing.T) {
			var h hits
			c := newTestClient(t, dropFirst(&h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("{}"))
			})))
			if err := tt.call(t.Context(), c); err == nil {
				t.Error("call succeeded after its connection broke")
			}
			if h.count() != 1 {
				t.Errorf("%d requests, want 1", h.count())
			}
		})
	}
}

// keyed are the calls with effects sent under an idempotency key.
var keyed = []struct {
	name string
	call func(context.Context, *Client) error
}{
	{"create", func(ctx context.Context, c *Client) error {
		_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		return err
	}},
	{"snapshot", func(ctx context.Context, c *Client) error {
		_, err := c.Snapshot(ctx, "sb-1", api.CreateSnapshotRequest{})
		return err
	}},
	{"restore", func(ctx context.Context, c *Client) error {
		_, err := c.Restore(ctx, "sn-1", api.RestoreRequest{})
		return err
	}},
}

// TestKeyedCallsRetryUnderOneKey: a create, snapshot or restore whose
// answer was lost is sent again with the same idempotency key (the server
// answers it once); the key is the context's when it has one.
func TestKeyedCallsRetryUnderOneKey(t *testing.T) {
	for _, tt := range keyed {
		for _, given := range []string{"", "my-key"} {
			t.Run(tt.name+"/"+given, func(t *testing.T) {
				var h hits
				var mu sync.Mutex
				var keys []string
				c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					keys = append(keys, r.Header.Get("Idempotency-Key"))
					mu.Unlock()
					dropFirst(&h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						w.Write([]byte(`{"sandboxes":[{"id":"sb-2"}],"id":"sb-2"}`))
					})).ServeHTTP(w, r)
				}))
				ctx := t.Context()
				if given != "" {
					ctx = WithIdempotencyKey(ctx, given)
				}
				if err := tt.call(ctx, c); err != nil {
					t.Fatalf("call: %v, want success on the retry", err)
				}
				if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] || (given != "" && keys[0] != given) {
					t.Errorf("keys sent %q; want the same one twice (%q if given)", keys, given)
				}
			})
		}
	}
}

// TestDeleteSandboxAfterLostAnswer: the first DELETE deletes the sandbox but
// its answer is lost; the retry's 404 means the delete was done.
func TestDeleteSandboxAfterLostAnswer(t *testing.T) {
	var h hits
	c := newTestClient(t, dropFirst(&h, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"code":"not_found","message":"sandbox sb-1 not found"}}`))
	})))
	if err := c.DeleteSandbox(t.Context(), "sb-1"); err != nil {
		t.Errorf("DeleteSandbox: %v, want success", err)
	}
	if h.count() != 2 {
		t.Errorf("%d requests, want 2", h.count())
	}
}

func TestDeleteUnknownSandbox(t *testing.T) {
	var h hits
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.n.Add(1)
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"code":"not_found","message":"sandbox sb-1 not found"}}`))
	}))
	if err := c.DeleteSandbox(t.Context(), "sb-1"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("error %v, want not_found", err)
	}
	if h.count() != 1 {
		t.Errorf("%d requests, want 1", h.count())
	}
}

// refusingClient is a client of srv whose first refuse dials are refused,
// as by a server that is not listening yet; dials counts every dial.
func refusingClient(srv *httptest.Server, refuse int, dials *atomic.Int64) *Client {
	var d net.Dialer
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if int(dials.Add(1)) <= refuse {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		return d.DialContext(ctx, network, addr)
	}
	return New(srv.URL, testKey, WithHTTPClient(&http.Client{Transport: t}), WithRetry(3, time.Millisecond))
}

func TestRetryOnConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/build") {
			w.Write([]byte(`{"template":{"name":"py"}}`))
			return
		}
		w.Write([]byte(mustJSON(sandbox)))
	}))
	defer srv.Close()
	calls := []struct {
		name string
		call func(context.Context, *Client) error
	}{{"get", func(ctx context.Context, c *Client) error {
		_, err := c.GetSandbox(ctx, "sb-1")
		return err
	}}}
	for _, tt := range append(calls, refusedOnly...) {
		t.Run(tt.name, func(t *testing.T) {
			var dials atomic.Int64
			c := refusingClient(srv, 2, &dials)
			if err := tt.call(t.Context(), c); err != nil {
				t.Errorf("call: %v, want success after two refused connections", err)
			}
			if dials.Load() != 3 {
				t.Errorf("%d dials, want 3", dials.Load())
			}
		})
	}
	for _, tt := range effects {
		t.Run(tt.name+" is never retried", func(t *testing.T) {
			var dials atomic.Int64
			c := refusingClient(srv, 1, &dials)
			if err := tt.call(t.Context(), c); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("error %v, want connection refused", err)
			}
			if dials.Load() != 1 {
				t.Errorf("%d dials, want 1", dials.Load())
			}
		})
	}
}

// TestRealConnectionRefused dials a port nobody listens on.
func TestRealConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var dials atomic.Int64
	var d net.Dialer
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	c := New("http://"+addr, testKey, WithHTTPClient(&http.Client{Transport: tr}), WithRetry(4, time.Millisecond))
	if _, err := c.GetSandbox(t.Context(), "sb-1"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error %v, want connection refused", err)
	}
	if dials.Load() != 4 {
		t.Errorf("%d dials, want 4", dials.Load())
	}
}

func TestCancelStopsRetrying(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(cancel)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := New(srv.URL, testKey, WithRetry(5, time.Hour))
	start := time.Now()
	if _, err := c.GetSandbox(ctx, "sb-1"); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: the backoff did not stop on cancel", d)
	}
}

func TestDelay(t *testing.T) {
	c := New("http://x", "", WithRetry(10, 100*time.Millisecond))
	for range 20 {
		waits := c.waits()
		for attempt := 1; attempt <= 9; attempt++ {
			want := 100 * time.Millisecond << min(attempt-1, 4)
			if d := waits.Next(); d < want/2 || d > want {
				t.Errorf("wait after attempt %d = %v, want in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}
