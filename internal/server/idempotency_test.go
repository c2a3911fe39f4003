package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"warren/api"
)

// memRequests is an in-memory Requests.
type memRequests struct {
	mu   sync.Mutex
	recs map[string]*Answer // by tenant + "\x00" + key
}

var _ Requests = (*memRequests)(nil)

func (m *memRequests) Claim(ctx context.Context, tenant, key, request string) (*Answer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs == nil {
		m.recs = map[string]*Answer{}
	}
	if a, ok := m.recs[tenant+"\x00"+key]; ok {
		c := *a
		return &c, nil
	}
	m.recs[tenant+"\x00"+key] = &Answer{Request: request}
	return nil, nil
}

func (m *memRequests) Answer(ctx context.Context, tenant, key string, status int, body []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.recs[tenant+"\x00"+key]
	a.Status, a.Body = status, append([]byte(nil), body...)
	return nil
}

func (m *memRequests) Release(ctx context.Context, tenant, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, tenant+"\x00"+key)
	return nil
}

// create sends a create with idempotency key key (none when "") and body.
func (e *testEnv) create(key, apiKey, body string) (int, http.Header, api.Sandbox, api.ErrorBody) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/v1/sandboxes", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if key != "" {
		req.Header.Set(api.IdempotencyKeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sb api.Sandbox
	var eb api.ErrorBody
	json.Unmarshal(b, &sb)
	json.Unmarshal(b, &eb)
	return resp.StatusCode, resp.Header, sb, eb
}

// TestIdempotentCreate: a create retried with its key, even many at once,
// makes one sandbox and answers each the same; the key with another body
// is refused; a create that failed with a 5xx runs again; keys are each
// tenant's own.
func TestIdempotentCreate(t *testing.T) {
	e := newTestEnv(t, nil, Options{Requests: &memRequests{}})
	status, _, first, _ := e.create("k1", e.keyA, `{"cpus":1}`)
	if status != http.StatusCreated || first.ID == "" {
		t.Fatalf("first create: %d %+v", status, first)
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			status, h, again, _ := e.create("k1", e.keyA, `{"cpus":1}`)
			if status != http.StatusCreated || again.ID != first.ID || h.Get(api.ReplayedHeader) != "true" {
				t.Errorf("a retry: %d %+v replayed %q; want the first answer again", status, again, h.Get(api.ReplayedHeader))
			}
		})
	}
	wg.Wait()
	if n := len(e.fake.boxes); n != 1 {
		t.Errorf("%d sandboxes after the retries, want 1", n)
	}
	if status, _, _, eb := e.create("k1", e.keyA, `{"cpus":2}`); status != http.StatusBadRequest || !strings.Contains(eb.Error.Message, "another request") {
		t.Errorf("the key with another body: %d %+v", status, eb)
	}
	if status, _, other, _ := e.create("k1", e.keyB, `{"cpus":1}`); status != http.StatusCreated || other.ID == first.ID {
		t.Errorf("tenant b's k1: %d %+v; want a sandbox of its own", status, other)
	}
	for _, try := range []int{1, 2} {
		if status, _, _, _ := e.create("k2", e.keyA, `{"template":"explode"}`); status != http.StatusInternalServerError {
			t.Errorf("failing create, try %d: %d, want it run (500) each time", try, status)
		}
	}
	// Many at once with a new key: one runs, the others wait for its answer.
	before := len(e.fake.boxes)
	ids := make(chan string, 5)
	for range 5 {
		wg.Go(func() {
			_, _, sb, _ := e.create("k3", e.keyA, `{}`)
			ids <- sb.ID
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 1 || len(e.fake.boxes) != before+1 {
		t.Errorf("five creates at once with one key: answers %v, %d new sandboxes; want one", seen, len(e.fake.boxes)-before)
	}
	if status, _, _, _ := e.create(strings.Repeat("k", 256), e.keyA, `{}`); status != http.StatusBadRequest {
		t.Errorf("a key of 256 characters: %d, want 400", status)
	}
}
