package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/internal/agentconn"
	"warren/internal/listing"
	"warren/internal/metrics"
)

// fakeSandboxes is an in-memory Sandboxes and Node: sandboxes are records
// only, and every one of them is served by the same agent connection.
//
// Some requests trigger faults for the tests of error handling: template
// "panic" makes Create panic, template "explode" makes it fail with an
// internal error.
type fakeSandboxes struct {
	conn *agentconn.Conn
	// build, when set, serves BuildTemplate.
	build func(ctx context.Context, name string, progress io.Writer) (api.Template, error)

	mu    sync.Mutex // guards the fields below
	next  int
	boxes map[string]fakeBox
	snaps map[string]fakeSnapshot
	// previews holds each sandbox's preview access, made on first use
	// (fake_ports_test.go).
	previews map[string]*api.Preview
	// ports maps "ID:PORT" to the address of a real listener DialPort
	// connects to (exposePort); any other port is a conflict.
	ports map[string]string
}

type fakeBox struct {
	tenant string
	sb     api.Sandbox
}

var _ Sandboxes = (*fakeSandboxes)(nil)

func (f *fakeSandboxes) Create(ctx context.Context, tenant string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	switch req.Template {
	case "panic":
		panic("secret panic detail")
	case "explode":
		return api.Sandbox{}, errors.New("disk exploded at /var/lib/secret")
	}
	for name, v := range map[string]float64{
		"cpus": req.CPUs, "memory_mb": float64(req.MemoryMB), "pids": float64(req.Pids),
		"disk_mb": float64(req.DiskMB), "timeout_seconds": float64(req.TimeoutSeconds),
	} {
		if v < 0 {
			return api.Sandbox{}, api.Errorf(api.CodeBadRequest, "%s must not be negative", name)
		}
	}
	if req.Template == "" {
		req.Template = "default"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	now := time.Now().UTC()
	sb := api.Sandbox{
		ID: fmt.Sprintf("sb-%d", f.next), Template: req.Template, Runtime: "container",
		Isolation: "container (shared host kernel)", State: api.StateRunning,
		CPUs: req.CPUs, MemoryMB: req.MemoryMB, Env: req.Env, Metadata: req.Metadata,
		CreatedAt: now.Add(time.Duration(f.next) * time.Millisecond), ExpiresAt: now.Add(time.Hour),
		AgentToken: fakeToken(),
	}
	if f.boxes == nil {
		f.boxes = map[string]fakeBox{}
	}
	f.boxes[sb.ID] = fakeBox{tenant: tenant, sb: sb}
	return sb, nil
}

// rotateAgentTokens gives each of tenant's sandboxes a new agent token
// and returns their IDs.
func (f *fakeSandboxes) rotateAgentTokens(tenant string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, b := range f.boxes {
		if b.tenant == tenant {
			b.sb.AgentToken = fakeToken()
			f.boxes[id] = b
			ids = append(ids, id)
		}
	}
	return ids
}

func (f *fakeSandboxes) lookup(tenant, id string) (api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok || (b.tenant != tenant && tenant != listing.AnyTenant) {
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	return b.sb, nil
}

func (f *fakeSandboxes) Get(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	return f.lookup(tenant, id)
}

func (f *fakeSandboxes) List(ctx context.Context, tenant string, states []string, page listing.Page) ([]api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Sandbox
	for _, b := range f.boxes {
		if b.tenant == tenant || tenant == listing.AnyTenant {
			b.sb.Env = nil // as the manager lists them
			out = append(out, b.sb)
		}
	}
	return fakePage(out, func(sb api.Sandbox) (time.Time, string, string) { return sb.CreatedAt, sb.ID, sb.State }, states, page), nil
}

// fakePage keeps of items those in one of states (all when empty) and
// after page.After, in creation order, at most page.Limit of them: what
// the store's keyset pages answer. key gives an item's creation time, id
// and state.
func fakePage[T any](items []T, key func(T) (time.Time, string, string), states []string, page listing.Page) []T {
	cmpKey := func(t time.Time, id string, c listing.Cursor) int {
		if n := t.Compare(c.CreatedAt); n != 0 {
			return n
		}
		return strings.Compare(id, c.ID)
	}
	items = slices.DeleteFunc(items, func(it T) bool {
		t, id, state := key(it)
		return (len(states) > 0 && !slices.Contains(states, state)) ||
			(page.After != listing.Cursor{} && cmpKey(t, id, page.After) <= 0)
	})
	slices.SortFunc(items, func(a, b T) int {
		ta, ida, _ := key(a)
		tb, idb, _ := key(b)
		return cmpKey(ta, ida, listing.Cursor{CreatedAt: tb, ID: idb})
	})
	if page.Limit > 0 && len(items) > page.Limit {
		items = items[:page.Limit]
	}
	return items
}

func (f *fakeSandboxes) Delete(ctx context.Context, tenant, id string) error {
	if _, err := f.lookup(tenant, id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.boxes, id)
	return nil
}

// Pause and Resume flip the fake's state: any running sandbox can pause.
func (f *fakeSandboxes) Pause(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	return f.flip(tenant, id, api.StateRunning, api.StatePaused)
}

func (f *fakeSandboxes) Resume(ctx context.Context, tenant, id string) (api.Sandbox, error) {
	return f.flip(tenant, id, api.StatePaused, api.StateRunning)
}

func (f *fakeSandboxes) flip(tenant, id, from, to string) (api.Sandbox, error) {
	sb, err := f.lookup(tenant, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if sb.State != from {
		return api.Sandbox{}, api.Errorf(api.CodeConflict, "sandbox %s is %s", id, sb.State)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sb.State = to
	f.boxes[id] = fakeBox{tenant: tenant, sb: sb}
	return sb, nil
}

func (f *fakeSandboxes) SetTimeout(ctx context.Context, tenant, id string, timeout time.Duration) (api.Sandbox, error) {
	sb, err := f.lookup(tenant, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if timeout < time.Second || timeout > 24*time.Hour {
		return api.Sandbox{}, api.Errorf(api.CodeBadRequest, "timeout_seconds must be between 1 and 86400")
	}
	sb.ExpiresAt = time.Now().Add(timeout).UTC()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boxes[id] = fakeBox{tenant: tenant, sb: sb}
	return sb, nil
}

func (f *fakeSandboxes) Agent(ctx context.Context, tenant, id string) (*agentconn.Conn, error) {
	if _, err := f.lookup(tenant, id); err != nil {
		return nil, err
	}
	return f.conn, nil
}

// Metrics answers fixed figures for a running sandbox.
func (f *fakeSandboxes) Metrics(ctx context.Context, tenant, id string) (api.SandboxMetrics, error) {
	sb, err := f.lookup(tenant, id)
	if err != nil {
		return api.SandboxMetrics{}, err
	}
	if sb.State != api.StateRunning {
		return api.SandboxMetrics{}, api.Errorf(api.CodeConflict, "sandbox %s is %s", id, sb.State)
	}
	return api.SandboxMetrics{At: time.Now().UTC(), CPUUsedPct: 12.5, CPUCount: 2, MemoryUsedBytes: 100 << 20, MemoryTotalBytes: 512 << 20,
		MemoryCacheBytes: 10 << 20, DiskUsedBytes: 1 << 30, DiskTotalBytes: 4 << 30, Pids: 3}, nil
}

func (f *fakeSandboxes) Network(ctx context.Context, tenant, id string) (api.NetworkStatus, error) {
	b, err := f.lookup(tenant, id)
	if err != nil {
		return api.NetworkStatus{}, err
	}
	return api.NetworkStatus{Policy: b.Network, Address: "10.0.2.15", Gateway: "10.0.2.2"}, nil
}

func (f *fakeSandboxes) SetNetwork(ctx context.Context, tenant, id string, p api.NetworkPolicy) (api.NetworkStatus, error) {
	if _, err := f.lookup(tenant, id); err != nil {
		return api.NetworkStatus{}, err
	}
	f.mu.Lock()
	b := f.boxes[id]
	b.sb.Network = p
	f.boxes[id] = b
	f.mu.Unlock()
	return f.Network(ctx, tenant, id)
}

func (f *fakeSandboxes) DialPort(ctx context.Context, tenant, id string, port int) (net.Conn, error) {
	sb, err := f.lookup(tenant, id)
	if err != nil {
		return nil, err
	}
	if sb.State != api.StateRunning {
		return nil, api.Errorf(api.CodeConflict, "sandbox %s is not running (state %s)", id, sb.State)
	}
	return f.dialExposed(ctx, id, port)
}

func (f *fakeSandboxes) Info(ctx context.Context, tenant string, admin bool) api.NodeInfo {
	info := api.NodeInfo{Version: "test", Kernel: "6.18", CgroupVersion: 1,
		Runtimes: []api.RuntimeInfo{{Name: "container", Isolation: "container (shared host kernel)", Available: true}}}
	if admin {
		info.BlobStore = "file:/test/blobs"
	}
	return info
}

func (f *fakeSandboxes) Templates(ctx context.Context) ([]api.Template, error) {
	return []api.Template{{Name: "default", SizeBytes: 1 << 30, UsedBytes: 300 << 20}}, nil
}

func (f *fakeSandboxes) BuildTemplate(ctx context.Context, name string, progress io.Writer) (api.Template, error) {
	if f.build != nil {
		return f.build(ctx, name, progress)
	}
	fmt.Fprintf(progress, "building %s\n", name)
	return api.Template{Name: name}, nil
}

// syncBuffer is a bytes.Buffer for a logger written by many goroutines.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testEnv is a server on a real listener, over a fakeSandboxes and a
// memKeys holding keys for tenants "a" and "b" and an admin key.
type testEnv struct {
	t                 *testing.T
	srv               *Server
	fake              *fakeSandboxes
	url               string
	keyA, keyB, admin string
	keys              *memKeys
	logs              *syncBuffer
}

func newTestEnv(t *testing.T, conn *agentconn.Conn, opts Options) *testEnv {
	t.Helper()
	e := &testEnv{t: t, fake: &fakeSandboxes{conn: conn}, logs: &syncBuffer{},
		keyA: "wk_test_a", keyB: "wk_test_b", admin: "wk_test_admin"}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", e.logs)
		}
	})
	if opts.Quotas == nil {
		opts.Quotas = &memQuotas{}
	}
	if opts.Pools == nil {
		opts.Pools = &memPools{}
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	keys := &memKeys{rotate: e.fake.rotateAgentTokens}
	e.keys = keys
	keys.add(e.keyA, Key{Tenant: "a"})
	keys.add(e.keyB, Key{Tenant: "b"})
	keys.add(e.admin, Key{Tenant: api.AdminTenant, Admin: true})
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.srv = New(e.fake, e.fake, keys, log, opts)
	// Served as the daemon serves it: its http.Server and its limits.
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = e.srv.HTTPServer(e.srv.Handler(), nil)
	hs.Listener = e.srv.Limit(hs.Listener)
	hs.Start()
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

// do sends a request; body may be nil, a string, []byte, an io.Reader or a
// value to encode as JSON.
func (e *testEnv) do(method, path, key string, body any) *http.Response {
	e.t.Helper()
	return e.doCtx(context.Background(), method, path, key, body)
}

func (e *testEnv) doCtx(ctx context.Context, method, path, key string, body any) *http.Response {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	case io.Reader:
		r = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// call sends a request, checks its status and decodes a JSON answer into
// out (unless nil).
func (e *testEnv) call(method, path, key string, body any, wantStatus int, out any) {
	e.t.Helper()
	resp := e.do(method, path, key, body)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, resp.StatusCode, wantStatus, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// apiError reads an error answer and checks its status and code.
func apiError(t *testing.T, resp *http.Response, wantStatus int, wantCode string) api.Error {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("%s %s: status %d, want %d; body %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, wantStatus, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q, want application/json", ct)
	}
	var body api.ErrorBody
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("error body %s: %v", data, err)
	}
	if body.Error.Code != wantCode || body.Error.Message == "" {
		t.Errorf("error %+v, want code %s and a message", body.Error, wantCode)
	}
	return body.Error
}

// readEvents reads ndjson lines of T until EOF.
func readEvents[T any](t *testing.T, r io.Reader) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var ev T
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("stream line %q: %v", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

// fakeSnapshot is a snapshot the fake keeps: every snapshot is durable at
// once.
type fakeSnapshot struct {
	tenant string
	sn     api.Snapshot
}

func (f *fakeSandboxes) Snapshot(ctx context.Context, tenant, id string, req api.CreateSnapshotRequest) (api.Snapshot, error) {
	sb, err := f.lookup(tenant, id)
	if err != nil {
		return api.Snapshot{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if holder, ok := f.named(tenant, req.Name); ok {
		return api.Snapshot{}, api.Errorf(api.CodeConflict, "the snapshot name %q is taken by snapshot %s", req.Name, holder.ID)
	}
	f.next++
	now := time.Now().UTC()
	sn := api.Snapshot{
		ID: fmt.Sprintf("sn-%d", f.next), Name: req.Name, SandboxID: id, Template: sb.Template, State: api.SnapshotDurable,
		CreatedAt: now, DurableAt: &now,
	}
	if f.snaps == nil {
		f.snaps = map[string]fakeSnapshot{}
	}
	// The parent is the sandbox's newest snapshot, as the engine's.
	for _, s := range f.snaps {
		if p, ok := f.snaps[sn.Parent]; s.sn.SandboxID == id && (!ok || s.sn.CreatedAt.After(p.sn.CreatedAt) ||
			s.sn.CreatedAt.Equal(p.sn.CreatedAt) && s.sn.ID > p.sn.ID) {
			sn.Parent = s.sn.ID
		}
	}
	f.snaps[sn.ID] = fakeSnapshot{tenant: tenant, sn: sn}
	return sn, nil
}

// named is tenant's snapshot named name, if it has one. f.mu is held.
func (f *fakeSandboxes) named(tenant, name string) (api.Snapshot, bool) {
	for _, s := range f.snaps {
		if name != "" && s.tenant == tenant && s.sn.Name == name {
			return s.sn, true
		}
	}
	return api.Snapshot{}, false
}

func (f *fakeSandboxes) GetSnapshot(ctx context.Context, tenant, ref string) (api.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.snaps[ref]; ok && s.tenant == tenant {
		return s.sn, nil
	}
	if sn, ok := f.named(tenant, ref); ok {
		return sn, nil
	}
	return api.Snapshot{}, api.Errorf(api.CodeNotFound, "snapshot %s not found", ref)
}

func (f *fakeSandboxes) ListSnapshots(ctx context.Context, tenant, sandboxID string, states []string, page listing.Page) ([]api.Snapshot, error) {
	if sandboxID != "" {
		if _, err := f.lookup(tenant, sandboxID); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Snapshot
	for _, s := range f.snaps {
		if s.tenant == tenant && (sandboxID == "" || s.sn.SandboxID == sandboxID) {
			out = append(out, s.sn)
		}
	}
	return fakePage(out, func(sn api.Snapshot) (time.Time, string, string) { return sn.CreatedAt, sn.ID, sn.State }, states, page), nil
}

func (f *fakeSandboxes) SnapshotLineage(ctx context.Context, tenant, id, after string, limit int) ([]string, bool, error) {
	sn, err := f.GetSnapshot(ctx, tenant, id)
	if err != nil {
		return nil, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	next := sn.Parent
	if after != "" {
		a, ok := f.snaps[after]
		if !ok || a.tenant != tenant {
			return nil, false, api.Errorf(api.CodeBadRequest, "bad page_token: it names no ancestor of snapshot %s", id)
		}
		next = a.sn.Parent
	}
	var out []string
	for ; next != ""; next = f.snaps[next].sn.Parent {
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, next)
	}
	return out, false, nil
}

func (f *fakeSandboxes) DeleteSnapshot(ctx context.Context, tenant, id string) error {
	if _, err := f.GetSnapshot(ctx, tenant, id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.snaps, id)
	return nil
}

func (f *fakeSandboxes) Fork(ctx context.Context, tenant, id string, req api.ForkRequest) (api.ForkResult, error) {
	sn, err := f.Snapshot(ctx, tenant, id, api.CreateSnapshotRequest{})
	if err != nil {
		return api.ForkResult{}, err
	}
	kids, err := f.Restore(ctx, tenant, sn.ID, api.RestoreRequest(req))
	if err != nil {
		return api.ForkResult{}, err
	}
	return api.ForkResult{Snapshot: sn, Sandboxes: kids}, nil
}

func (f *fakeSandboxes) Restore(ctx context.Context, tenant, id string, req api.RestoreRequest) ([]api.Sandbox, error) {
	sn, err := f.GetSnapshot(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if req.Count < 0 || req.Count > 256 {
		return nil, api.Errorf(api.CodeBadRequest, "count must be between 1 and 256, got %d", req.Count)
	}
	var out []api.Sandbox
	for range max(req.Count, 1) {
		sb, err := f.Create(ctx, tenant, api.CreateSandboxRequest{Template: sn.Template, SandboxSpec: api.SandboxSpec{Env: req.Env, Metadata: req.Metadata}})
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, nil
}

func (f *fakeSandboxes) GCSnapshots(ctx context.Context, grace time.Duration) (api.GCResult, error) {
	return api.GCResult{}, nil
}

// memKeys is an in-memory Keys: its keys are the names tests give them.
// Its agent tokens are rotate's (none when it is nil).
type memKeys struct {
	rotate func(tenant string) []string

	mu      sync.Mutex
	recs    map[string]Key // by key
	n       int
	revoked int64 // the revocation count
}

var _ Keys = (*memKeys)(nil)

// add records key as rec (its ID and time are made here).
func (k *memKeys) add(key string, rec Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.recs == nil {
		k.recs = map[string]Key{}
	}
	k.n++
	rec.ID, rec.CreatedAt = fmt.Sprintf("key-%d", k.n), time.Unix(int64(k.n), 0)
	k.recs[key] = rec
}

func (k *memKeys) LookupKey(ctx context.Context, key string) (Key, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if rec, ok := k.recs[key]; ok {
		return rec, nil
	}
	return Key{}, ErrUnknownKey
}

func (k *memKeys) CreateKey(ctx context.Context, tenant, scope string) (string, error) {
	k.mu.Lock()
	key := fmt.Sprintf("wk_new_%d", k.n)
	k.mu.Unlock()
	k.add(key, Key{Tenant: tenant, Scope: scope})
	return key, nil
}

func (k *memKeys) ListKeys(ctx context.Context, page listing.Page) ([]Key, error) {
	k.mu.Lock()
	out := slices.Collect(maps.Values(k.recs))
	k.mu.Unlock()
	return fakePage(out, func(k Key) (time.Time, string, string) { return k.CreatedAt, k.ID, "" }, nil, page), nil
}

func (k *memKeys) DeleteKey(ctx context.Context, id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, rec := range k.recs {
		if rec.ID == id {
			delete(k.recs, key)
			k.revoked++
			return nil
		}
	}
	return ErrUnknownKey
}

// deleteTenant revokes every key of tenant, as another process of a fleet
// would: the server that serves its requests is not told.
func (k *memKeys) deleteTenant(tenant string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, rec := range k.recs {
		if rec.Tenant == tenant {
			delete(k.recs, key)
		}
	}
	k.revoked++
}

func (k *memKeys) MissingKeys(ctx context.Context, ids []string) ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, id := range ids {
		if !slices.ContainsFunc(slices.Collect(maps.Values(k.recs)), func(rec Key) bool { return rec.ID == id }) {
			out = append(out, id)
		}
	}
	return out, nil
}

func (k *memKeys) RotateAgentTokens(ctx context.Context, tenant string) ([]string, error) {
	var ids []string
	if k.rotate != nil {
		ids = k.rotate(tenant)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.revoked++
	return ids, nil
}

func (k *memKeys) Revocations(ctx context.Context) (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.revoked, nil
}

// memQuotas is an in-memory Quotas.
type memQuotas struct {
	mu sync.Mutex
	q  map[string]api.Quota
}

func (m *memQuotas) Quota(ctx context.Context, tenant string) (api.Quota, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.q[tenant], nil
}

func (m *memQuotas) SetQuota(ctx context.Context, tenant string, q api.Quota) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.q == nil {
		m.q = map[string]api.Quota{}
	}
	m.q[tenant] = q
	return nil
}

// memPools is an in-memory Pools.
type memPools struct {
	mu    sync.Mutex
	pools []api.Pool
}

func (m *memPools) Pools(ctx context.Context) ([]api.Pool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.pools), nil
}

func (m *memPools) SetPool(ctx context.Context, template string, spec api.PoolSpec) (api.Pool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := api.Pool{Template: template, PoolSpec: spec}
	m.pools = append(slices.DeleteFunc(m.pools, func(q api.Pool) bool { return q.Template == template && q.Runtime == spec.Runtime }), p)
	return p, nil
}

func (m *memPools) DeletePool(ctx context.Context, template, runtime string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.pools)
	m.pools = slices.DeleteFunc(m.pools, func(q api.Pool) bool { return q.Template == template && q.Runtime == runtime })
	if len(m.pools) == n {
		return api.Errorf(api.CodeNotFound, "no pool of template %q and runtime %q", template, runtime)
	}
	return nil
}
