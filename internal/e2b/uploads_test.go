package e2b

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"warren/api"
	"warren/internal/archive/archivetest"
	"warren/internal/backoff"
)

// buildServer is the translation over a fake warren API that knows
// templates, served over real HTTP: E2B's template build routes as the
// SDKs call them, upload URLs included.
type buildServer struct {
	t   *testing.T
	f   *fakeAPI
	h   *Handler
	url string
}

func newBuildServer(t *testing.T, opts Options) *buildServer {
	return newBuildServerOver(t, opts, func(f *fakeAPI) http.Handler { return f })
}

// newBuildServerOver is newBuildServer with warren's API the handler
// over makes of the fake.
func newBuildServerOver(t *testing.T, opts Options, over func(*fakeAPI) http.Handler) *buildServer {
	f := &fakeAPI{}
	f.answer("GET /v1/templates", http.StatusOK, []api.Template{})
	f.answer("POST /v1/templates", http.StatusAccepted, api.Template{Name: "app", Version: 1, Ref: "app@1", State: api.TemplateBuilding})
	opts.Dir = t.TempDir()
	h := New(over(f), opts)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	t.Cleanup(h.Close)
	return &buildServer{t: t, f: f, h: h, url: s.URL}
}

// do sends a request of n bytes of body (-1: unknown) and returns the
// status and E2B's error message, or the body when it is no error.
func (s *buildServer) do(method, url, key string, body io.Reader, n int64) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.ContentLength = n
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb struct{ Message string }
	if resp.StatusCode >= 300 && json.Unmarshal(b, &eb) == nil {
		return resp.StatusCode, eb.Message
	}
	return resp.StatusCode, string(b)
}

func (s *buildServer) requestBuild(key, name string) string {
	s.t.Helper()
	code, body := s.do("POST", s.url+"/e2b/v3/templates", key, strings.NewReader(`{"name":"`+name+`"}`), -1)
	var out struct{ BuildID string }
	if code != http.StatusAccepted || json.Unmarshal([]byte(body), &out) != nil {
		s.t.Fatalf("request a build: %d %s", code, body)
	}
	return out.BuildID
}

// link asks where to upload the files of hash; it returns the status and
// the URL ("" when the files are present or on an error).
func (s *buildServer) link(key, name, hash string) (int, string) {
	s.t.Helper()
	code, body := s.do("GET", s.url+"/e2b/templates/"+name+"/files/"+hash, key, nil, 0)
	var out struct {
		Present bool
		URL     string
	}
	if code == http.StatusOK && json.Unmarshal([]byte(body), &out) != nil {
		s.t.Fatalf("link: %s", body)
	}
	return code, out.URL
}

func (s *buildServer) mustLink(key, name, hash string) string {
	s.t.Helper()
	code, u := s.link(key, name, hash)
	if code != http.StatusOK || u == "" {
		s.t.Fatalf("link of %s: %d, URL %q", hash, code, u)
	}
	return u
}

func (s *buildServer) trigger(key, name, id string, tpl e2bTemplate) (int, string) {
	s.t.Helper()
	b, _ := json.Marshal(tpl)
	return s.do("POST", s.url+"/e2b/v2/templates/"+name+"/builds/"+id, key, bytes.NewReader(b), int64(len(b)))
}

// held is what the handler holds of tenants' bytes, on the server and
// per tenant.
func (s *buildServer) held() (int64, map[string]int64) {
	s.h.builds.mu.Lock()
	defer s.h.builds.mu.Unlock()
	tenants := map[string]int64{}
	for k, v := range s.h.builds.tenants {
		tenants[k] = v
	}
	return s.h.builds.bytes, tenants
}

// tarOf is a tar of one file, name, of size zero bytes, gzipped if gz.
func tarOf(t *testing.T, name string, size int64, gz bool) []byte {
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if gz {
		zw.Close()
	}
	return buf.Bytes()
}

// zeros reads endless zero bytes, allocating nothing.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// uploadAll uploads size bytes to every URL at once, each upload's body
// held after its first MiB until every upload has started (or been
// refused): what the handler decided before reading a body, it decided
// for all of them together. It returns each upload's status.
func uploadAll(s *buildServer, urls []string, size int64) []int {
	var started sync.WaitGroup
	started.Add(len(urls))
	codes := make([]int, len(urls))
	var done sync.WaitGroup
	for i, u := range urls {
		done.Add(1)
		pr, pw := io.Pipe()
		go func() {
			first := min(size, 1<<20)
			_, err := io.CopyN(pw, zeros{}, first)
			started.Done()
			started.Wait()
			if err == nil {
				_, err = io.CopyN(pw, zeros{}, size-first)
			}
			pw.CloseWithError(err)
		}()
		go func() {
			defer done.Done()
			req, _ := http.NewRequest("PUT", u, pr)
			req.ContentLength = size
			resp, err := http.DefaultClient.Do(req)
			pr.CloseWithError(io.ErrClosedPipe)
			if err != nil {
				s.t.Errorf("upload %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	done.Wait()
	return codes
}

func accepted(codes []int) int {
	n := 0
	for _, c := range codes {
		if c == http.StatusOK {
			n++
		}
	}
	return n
}

func copyStep(hash string) e2bStep {
	return e2bStep{Type: "COPY", Args: []string{".", "/opt/app"}, FilesHash: hash}
}

// TestUploadedSparseTar (issue 35, row 2): a COPY upload of 10 KiB whose
// tar holds a PAX sparse file was expanded in the daemon's memory to its
// logical size, without bound. Now the trigger refuses it, naming why,
// before anything is expanded.
func TestUploadedSparseTar(t *testing.T) {
	s := newBuildServer(t, Options{})
	id := s.requestBuild("k1", "app")
	sparse := archivetest.SparseTar(96 << 20)
	if code, msg := s.do("PUT", s.mustLink("k1", "app", "aa"), "", bytes.NewReader(sparse), int64(len(sparse))); code != http.StatusOK {
		t.Fatalf("upload: %d %s", code, msg)
	}
	code, msg := s.trigger("k1", "app", id, e2bTemplate{FromTemplate: "base", Steps: []e2bStep{copyStep("aa")}})
	if code != http.StatusBadRequest || !strings.Contains(msg, "sparse") {
		t.Errorf("trigger: %d %q, want 400 saying sparse entries are refused", code, msg)
	}
}

// TestContextBoundedAsBuilt (issue 35, row 2): gzipped uploads within the
// per-build bound that expand beyond it were joined into one context in
// memory, whatever its size. Now the context is bounded as it is written,
// and the trigger is a 400 naming the bound.
func TestContextBoundedAsBuilt(t *testing.T) {
	s := newBuildServer(t, Options{})
	id := s.requestBuild("k1", "app")
	for _, hash := range []string{"aa", "bb"} {
		gz := tarOf(t, "f"+hash, 40<<20, true)
		if code, msg := s.do("PUT", s.mustLink("k1", "app", hash), "", bytes.NewReader(gz), int64(len(gz))); code != http.StatusOK {
			t.Fatalf("upload: %d %s", code, msg)
		}
	}
	code, msg := s.trigger("k1", "app", id, e2bTemplate{FromTemplate: "base", Steps: []e2bStep{copyStep("aa"), copyStep("bb")}})
	if code != http.StatusBadRequest || !strings.Contains(msg, "64 MiB") {
		t.Errorf("trigger: %d %q, want 400 naming 64 MiB", code, msg)
	}
}

// TestConcurrentUploadsOneBuild (issue 35, row 5): the room left for a
// build's files was computed before its bodies were read: six concurrent
// uploads of 24 MiB to one build were all accepted. Now at most the
// build's 64 MiB are.
func TestConcurrentUploadsOneBuild(t *testing.T) {
	s := newBuildServer(t, Options{})
	s.requestBuild("k1", "app")
	var urls []string
	for i := range 6 {
		urls = append(urls, s.mustLink("k1", "app", fmt.Sprintf("%02x", i)))
	}
	codes := uploadAll(s, urls, 24<<20)
	if n := accepted(codes); n == 0 || n*24 > 64 {
		t.Errorf("%d of six 24 MiB uploads to one build accepted (%v), want 1 to 2 (64 MiB)", n, codes)
	}
	if all, _ := s.held(); all > api.MaxTemplateContext {
		t.Errorf("%d bytes held for one build, more than %d", all, api.MaxTemplateContext)
	}
}

// TestUploadsTenantShare (issue 35, row 5): concurrent uploads of one
// tenant to several builds passed the server-wide cap, and then every
// tenant's uploads were refused. Now a tenant holds at most its share, and
// another tenant's upload goes through.
func TestUploadsTenantShare(t *testing.T) {
	s := newBuildServer(t, Options{})
	var urls []string
	for range 5 {
		s.requestBuild("tenant-a", "app")
		urls = append(urls, s.mustLink("tenant-a", "app", "aa"))
	}
	codes := uploadAll(s, urls, 56<<20)
	if n := accepted(codes); n == 0 || int64(n)*56<<20 > maxTenantFiles {
		t.Errorf("%d of tenant A's five 56 MiB uploads accepted (%v), want 1 to %d", n, codes, maxTenantFiles/(56<<20))
	}
	s.requestBuild("tenant-b", "app")
	if codes := uploadAll(s, []string{s.mustLink("tenant-b", "app", "bb")}, 56<<20); codes[0] != http.StatusOK {
		t.Errorf("tenant B's upload after tenant A's: %d, want 200", codes[0])
	}
}

// TestUploadsGivenBackAtTrigger (issue 35, row 5): a build's files stayed
// held for an hour after its build had taken them. Now what the trigger
// took is given back once the build has its context.
func TestUploadsGivenBackAtTrigger(t *testing.T) {
	s := newBuildServer(t, Options{})
	id := s.requestBuild("k1", "app")
	data := tarOf(t, "app/data", 8<<20, false)
	if code, msg := s.do("PUT", s.mustLink("k1", "app", "aa"), "", bytes.NewReader(data), int64(len(data))); code != http.StatusOK {
		t.Fatalf("upload: %d %s", code, msg)
	}
	if code, msg := s.trigger("k1", "app", id, e2bTemplate{FromTemplate: "base", Steps: []e2bStep{copyStep("aa")}}); code != http.StatusAccepted {
		t.Fatalf("trigger: %d %s", code, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var all int64
	var tenants map[string]int64
	err := backoff.Poll(ctx, backoff.Backoff{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond}, func() (bool, error) {
		all, tenants = s.held()
		return all == 0, nil
	})
	if err != nil {
		t.Errorf("%d bytes still held after the trigger (%v), want 0", all, tenants)
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	var sent api.CreateTemplateRequest
	for i, c := range s.f.calls {
		if strings.HasPrefix(c, "POST /v1/templates ") {
			json.Unmarshal([]byte(s.f.bodies[i]), &sent)
		}
	}
	tr := tar.NewReader(bytes.NewReader(sent.Context))
	if h, err := tr.Next(); err != nil || h.Name != "app/data" || h.Size != 8<<20 {
		t.Errorf("the build's context: %v, %v; want app/data of 8 MiB", h, err)
	}
}

// TestContextsHandedOffInTurn: warren's API takes a build's context whole,
// so a triggered build reads it into memory only with one of maxHandoffs
// turns; other builds' contexts wait on disk, however many are triggered.
func TestContextsHandedOffInTurn(t *testing.T) {
	var in, most atomic.Int32
	gate := make(chan struct{})
	s := newBuildServerOver(t, Options{}, func(f *fakeAPI) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/v1/templates" {
				n := in.Add(1)
				defer in.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-gate
			}
			f.ServeHTTP(w, r)
		})
	})
	const builds = maxHandoffs + 2
	data := tarOf(t, "app/data", 1<<20, false)
	for i := range builds {
		key := fmt.Sprint("k", i)
		id := s.requestBuild(key, "app")
		if code, msg := s.do("PUT", s.mustLink(key, "app", "aa"), "", bytes.NewReader(data), int64(len(data))); code != http.StatusOK {
			t.Fatalf("upload: %d %s", code, msg)
		}
		if code, msg := s.trigger(key, "app", id, e2bTemplate{FromTemplate: "base", Steps: []e2bStep{copyStep("aa")}}); code != http.StatusAccepted {
			t.Fatalf("trigger: %d %s", code, msg)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}, func() (bool, error) {
		return in.Load() == maxHandoffs, nil
	}); err != nil {
		t.Fatalf("%d contexts handed off, want %d", in.Load(), maxHandoffs)
	}
	// The others stay on disk while the first ones are handed off: give
	// them time to show up, which they must not.
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	backoff.Poll(short, backoff.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}, func() (bool, error) {
		return in.Load() > maxHandoffs, nil
	})
	close(gate)
	if err := backoff.Poll(ctx, backoff.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}, func() (bool, error) {
		s.f.mu.Lock()
		defer s.f.mu.Unlock()
		n := 0
		for _, c := range s.f.calls {
			if strings.HasPrefix(c, "POST /v1/templates ") {
				n++
			}
		}
		return n == builds, nil
	}); err != nil {
		t.Fatalf("not every build was handed off: %v", err)
	}
	if m := most.Load(); m != maxHandoffs {
		t.Errorf("%d contexts in memory at once, want %d", m, maxHandoffs)
	}
}

// TestUploadTokens (issue 35, row 7): every request for an upload URL
// minted a token, kept an hour: 20,000 requests added 13 MB. Now a build
// has one live token per file, and at most maxFilesPerBuild files.
func TestUploadTokens(t *testing.T) {
	s := newBuildServer(t, Options{})
	s.requestBuild("k1", "app")
	first := s.mustLink("k1", "app", "aa")
	for range 500 {
		if u := s.mustLink("k1", "app", "aa"); u != first {
			t.Fatalf("a second URL for the same files: %s, then %s", first, u)
		}
	}
	for i := 1; i < maxFilesPerBuild; i++ {
		s.mustLink("k1", "app", fmt.Sprintf("%04x", i))
	}
	if code, _ := s.link("k1", "app", "ffff"); code != http.StatusTooManyRequests {
		t.Errorf("file %d of a build: %d, want 429", maxFilesPerBuild+1, code)
	}
}

// TestBuildsOfATenant: a tenant's keys share its bounds: the builds
// waiting of one key count against the other's.
func TestBuildsOfATenant(t *testing.T) {
	s := newBuildServer(t, Options{Tenant: func(r *http.Request) (string, error) {
		return strings.TrimRight(r.Header.Get("X-API-Key"), "0123456789"), nil
	}})
	for range maxWaitingPerTenant {
		s.requestBuild("a1", "app")
	}
	if code, msg := s.do("POST", s.url+"/e2b/v3/templates", "a2", strings.NewReader(`{"name":"app"}`), -1); code != http.StatusTooManyRequests {
		t.Errorf("a build of the tenant's other key: %d %s, want 429", code, msg)
	}
	s.requestBuild("b1", "app")
}

// TestUntriggeredBuildDropped: a build that waits, idle, past waitFor for
// its trigger is dropped with its files, without another request coming.
func TestUntriggeredBuildDropped(t *testing.T) {
	defer func(d time.Duration) { waitFor = d }(waitFor)
	waitFor = 500 * time.Millisecond
	data := tarOf(t, "app/data", 1<<20, false)
	s := newBuildServer(t, Options{})
	s.requestBuild("k1", "app")
	if code, msg := s.do("PUT", s.mustLink("k1", "app", "aa"), "", bytes.NewReader(data), int64(len(data))); code != http.StatusOK {
		t.Fatalf("upload: %d %s", code, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var all int64
	err := backoff.Poll(ctx, backoff.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}, func() (bool, error) {
		all, _ = s.held()
		return all == 0, nil
	})
	if err != nil {
		t.Errorf("%d bytes held by an idle build, want it dropped", all)
	}
}
