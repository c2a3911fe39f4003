package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

const fakeKey = "test-key"

// fakeWarren is a small in-memory warren server: enough of the API for the
// CLI's commands, with a few canned "programs" in place of a sandbox.
//
// Programs: echo ARGS, exit N, cat (copies stdin), binary (writes every byte
// value), sleep (times out when given a timeout), forever (runs until
// signalled); anything else is not found (127).
type fakeWarren struct {
	t   *testing.T
	srv *httptest.Server

	attached chan struct{} // receives when an attach waits for its process

	mu        sync.Mutex // guards the fields below
	nextID    int
	sandboxes map[string]api.Sandbox
	creates   []api.CreateSandboxRequest
	files     map[string][]byte // by sandbox ID + ":" + path
	fileModes map[string]string // the mode query of each upload, same keys
	procs     map[uint32]*fakeProc
	nextPID   uint32
	signals   []string
	replays   []string // the replay query of each attach
	removes   []string // path and recursive of each file removal
	snapshots []api.CreateSnapshotRequest
	restores  []api.RestoreRequest
	previews  map[string]api.Preview
	// previewDomain is the URL template's domain; "" for none.
	previewDomain string
}

// fakeProc is a background process of the fake.
type fakeProc struct {
	argv      []string
	timeoutMs int64
	stdin     bytes.Buffer
	done      chan struct{} // closed when the process has ended
	events    []api.ExecEvent
}

// newFake starts a fake server and points the environment of the test at it.
func newFake(t *testing.T) *fakeWarren {
	f := &fakeWarren{
		t:         t,
		attached:  make(chan struct{}, 16),
		sandboxes: map[string]api.Sandbox{},
		files:     map[string][]byte{},
		fileModes: map[string]string{},
		procs:     map[uint32]*fakeProc{},
		nextPID:   100,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", f.info)
	mux.HandleFunc("POST /v1/sandboxes", f.create)
	mux.HandleFunc("GET /v1/sandboxes", f.list)
	mux.HandleFunc("GET /v1/sandboxes/{id}", f.sandbox(f.get))
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", f.sandbox(f.delete))
	mux.HandleFunc("POST /v1/sandboxes/{id}/timeout", f.sandbox(f.timeout))
	mux.HandleFunc("GET /v1/sandboxes/{id}/preview", f.sandbox(f.getPreview))
	mux.HandleFunc("PUT /v1/sandboxes/{id}/preview", f.sandbox(f.setPreview))
	mux.HandleFunc("GET /v1/sandboxes/{id}/network", f.sandbox(f.getNetwork))
	mux.HandleFunc("PUT /v1/sandboxes/{id}/network", f.sandbox(f.setNetwork))
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", f.sandbox(f.exec))
	mux.HandleFunc("GET /v1/sandboxes/{id}/processes/{pid}/stream", f.process(f.attach))
	mux.HandleFunc("POST /v1/sandboxes/{id}/processes/{pid}/stdin", f.process(f.stdin))
	mux.HandleFunc("POST /v1/sandboxes/{id}/processes/{pid}/signal", f.process(f.signal))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", f.sandbox(f.readFile))
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", f.sandbox(f.writeFile))
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/files", f.sandbox(f.removeFile))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", f.sandbox(f.stat))
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/list", f.sandbox(f.listFiles))
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", f.sandbox(f.mkdir))
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/move", f.sandbox(f.move))
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", f.sandbox(f.snapshot))
	mux.HandleFunc("POST /v1/snapshots/{id}/restore", f.restore)
	mux.HandleFunc("GET /v1/templates", f.templates)
	mux.HandleFunc("POST /v1/templates/{name}/build", f.build)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+fakeKey {
			fail(w, api.Errorf(api.CodeUnauthorized, "bad API key"))
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	t.Setenv(client.EnvURL, f.srv.URL)
	t.Setenv(client.EnvAPIKey, fakeKey)
	return f
}

// with runs fn with f.mu held, for a test to read or set the fake's state.
func (f *fakeWarren) with(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

func fail(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status())
	json.NewEncoder(w).Encode(api.ErrorBody{Error: *e})
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// addSandbox adds a running sandbox and returns its ID.
func (f *fakeWarren) addSandbox(req api.CreateSandboxRequest) api.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	sb := api.Sandbox{ID: fmt.Sprintf("sb-%d", f.nextID), Template: req.Template, Runtime: "container",
		Isolation: "container (shared host kernel)", State: api.StateRunning, CPUs: req.CPUs, MemoryMB: req.MemoryMB,
		Env: req.Env, Metadata: req.Metadata, CreatedAt: now, ExpiresAt: now.Add(time.Duration(req.TimeoutSeconds) * time.Second)}
	if req.Network != nil {
		sb.Network = *req.Network
	}
	f.sandboxes[sb.ID] = sb
	return sb
}

// sandbox wraps a handler of a sandbox's route: unknown sandboxes are 404.
func (f *fakeWarren) sandbox(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.mu.Lock()
		_, ok := f.sandboxes[id]
		f.mu.Unlock()
		if !ok {
			fail(w, api.Errorf(api.CodeNotFound, "sandbox %s not found", id))
			return
		}
		h(w, r, id)
	}
}

// process wraps a handler of a process's route.
func (f *fakeWarren) process(h func(http.ResponseWriter, *http.Request, *fakeProc)) http.HandlerFunc {
	return f.sandbox(func(w http.ResponseWriter, r *http.Request, _ string) {
		pid, _ := strconv.ParseUint(r.PathValue("pid"), 10, 32)
		f.mu.Lock()
		p := f.procs[uint32(pid)]
		f.mu.Unlock()
		if p == nil {
			fail(w, api.Errorf(api.CodeNotFound, "process %d not found", pid))
			return
		}
		h(w, r, p)
	})
}

func (f *fakeWarren) info(w http.ResponseWriter, r *http.Request) {
	answer(w, 200, api.NodeInfo{Version: "v0.0.1", Kernel: "6.18.0", CloneMode: "reflink (xfs loop image)", CgroupVersion: 1, Sandboxes: 2,
		Runtimes: []api.RuntimeInfo{
			{Name: "container", Isolation: "container (shared host kernel)", Available: true},
			{Name: "vm", Isolation: "vm (hardware virtualization)", Reason: "no usable KVM"},
		}})
}

func (f *fakeWarren) create(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, api.Errorf(api.CodeBadRequest, "bad body"))
		return
	}
	f.mu.Lock()
	f.creates = append(f.creates, req)
	f.mu.Unlock()
	answer(w, http.StatusCreated, f.addSandbox(req))
}

func (f *fakeWarren) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var states []string
	if v := r.URL.Query().Get("state"); v != "" {
		states = strings.Split(v, ",")
	}
	var list []api.Sandbox
	for _, id := range slices.Sorted(maps.Keys(f.sandboxes)) {
		if sb := f.sandboxes[id]; len(states) == 0 || slices.Contains(states, sb.State) {
			list = append(list, sb)
		}
	}
	answer(w, 200, map[string]any{"sandboxes": list})
}

func (f *fakeWarren) get(w http.ResponseWriter, r *http.Request, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	answer(w, 200, f.sandboxes[id])
}

func (f *fakeWarren) delete(w http.ResponseWriter, r *http.Request, id string) {
	f.mu.Lock()
	delete(f.sandboxes, id)
	f.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeWarren) timeout(w http.ResponseWriter, r *http.Request, id string) {
	var req api.SetTimeoutRequest
	json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.sandboxes[id]
	sb.ExpiresAt = sb.CreatedAt.Add(time.Duration(req.TimeoutSeconds) * time.Second)
	f.sandboxes[id] = sb
	answer(w, 200, sb)
}

func (f *fakeWarren) snapshot(w http.ResponseWriter, r *http.Request, id string) {
	var req api.CreateSnapshotRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, api.Errorf(api.CodeBadRequest, "bad body"))
		return
	}
	f.mu.Lock()
	f.snapshots = append(f.snapshots, req)
	state := api.SnapshotPending
	if req.Wait {
		state = api.SnapshotDurable
	}
	sn := api.Snapshot{ID: fmt.Sprintf("snap-%d", len(f.snapshots)), SandboxID: id, Scope: req.Scope, State: state}
	f.mu.Unlock()
	answer(w, http.StatusCreated, sn)
}

// restore starts Count sandboxes from any snapshot: the fake keeps none.
func (f *fakeWarren) restore(w http.ResponseWriter, r *http.Request) {
	var req api.RestoreRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, api.Errorf(api.CodeBadRequest, "bad body"))
		return
	}
	f.mu.Lock()
	f.restores = append(f.restores, req)
	f.mu.Unlock()
	var res api.RestoreResult
	for range max(req.Count, 1) {
		res.Sandboxes = append(res.Sandboxes, f.addSandbox(api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{TimeoutSeconds: req.TimeoutSeconds}}))
	}
	answer(w, http.StatusCreated, res)
}

// program runs a canned program and returns its output and end events.
func program(argv []string, stdin []byte, timeoutMs int64) []api.ExecEvent {
	end := func(code int) api.ExecEvent {
		return api.ExecEvent{Type: api.EventEnd, ExitCode: &code, Status: fmt.Sprintf("exit status %d", code)}
	}
	out := func(typ string, data []byte) []api.ExecEvent {
		// Two events, so that the client must join them.
		h := len(data) / 2
		return []api.ExecEvent{{Type: typ, Data: data[:h]}, {Type: typ, Data: data[h:]}}
	}
	switch argv[0] {
	case "echo":
		return append(out(api.EventStdout, []byte(strings.Join(argv[1:], " ")+"\n")), end(0))
	case "exit":
		code, _ := strconv.Atoi(argv[1])
		return []api.ExecEvent{end(code)}
	case "cat":
		return append(out(api.EventStdout, stdin), end(0))
	case "binary":
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		evs := out(api.EventStdout, all)
		evs = append(evs, out(api.EventStderr, []byte("\xff\xfe\x00err"))...)
		return append(evs, end(0))
	case "sleep":
		if timeoutMs > 0 {
			ev := end(137)
			ev.TimedOut, ev.Status = true, "signal: killed"
			return []api.ExecEvent{ev}
		}
		return []api.ExecEvent{end(0)}
	default:
		return append(out(api.EventStderr, []byte(argv[0]+": not found\n")), end(127))
	}
}

func (f *fakeWarren) exec(w http.ResponseWriter, r *http.Request, id string) {
	var req api.ExecRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Cmd) == 0 {
		fail(w, api.Errorf(api.CodeBadRequest, "bad body"))
		return
	}
	if req.Background {
		f.mu.Lock()
		f.nextPID++
		pid := f.nextPID
		p := &fakeProc{argv: req.Cmd, timeoutMs: req.TimeoutMs, done: make(chan struct{})}
		f.procs[pid] = p
		if req.Cmd[0] != "cat" && req.Cmd[0] != "forever" {
			p.finish(nil)
		}
		f.mu.Unlock()
		answer(w, http.StatusAccepted, api.StartedProcess{PID: pid})
		return
	}
	if !req.Stream {
		fail(w, api.Errorf(api.CodeBadRequest, "the fake only streams"))
		return
	}
	f.mu.Lock()
	f.nextPID++
	pid := f.nextPID
	f.mu.Unlock()
	writeEvents(w, pid, program(req.Cmd, req.Stdin, req.TimeoutMs))
}

// finish ends p with the output of its program; f.mu must be held.
func (p *fakeProc) finish(events []api.ExecEvent) {
	if events == nil {
		events = program(p.argv, p.stdin.Bytes(), p.timeoutMs)
	}
	p.events = events
	close(p.done)
}

func writeEvents(w http.ResponseWriter, pid uint32, events []api.ExecEvent) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	enc.Encode(api.ExecEvent{Type: api.EventStart, PID: pid})
	for _, ev := range events {
		ev.PID = pid
		enc.Encode(ev)
		http.NewResponseController(w).Flush()
	}
}

func (f *fakeWarren) attach(w http.ResponseWriter, r *http.Request, p *fakeProc) {
	f.mu.Lock()
	f.replays = append(f.replays, r.URL.Query().Get("replay"))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-ndjson")
	http.NewResponseController(w).Flush()
	f.attached <- struct{}{}
	select {
	case <-p.done:
	case <-r.Context().Done():
		return
	}
	pid, _ := strconv.ParseUint(r.PathValue("pid"), 10, 32)
	f.mu.Lock()
	events := p.events
	f.mu.Unlock()
	writeEvents(w, uint32(pid), events)
}

func (f *fakeWarren) stdin(w http.ResponseWriter, r *http.Request, p *fakeProc) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-p.done:
		fail(w, api.Errorf(api.CodeConflict, "process ended"))
		return
	default:
	}
	p.stdin.Write(data)
	if r.URL.Query().Get("close") == "true" && p.argv[0] == "cat" {
		p.finish(nil)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeWarren) signal(w http.ResponseWriter, r *http.Request, p *fakeProc) {
	var req api.SignalRequest
	json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, req.Signal)
	select {
	case <-p.done:
	default:
		code := 137
		p.finish([]api.ExecEvent{{Type: api.EventEnd, ExitCode: &code, Status: "signal: killed"}})
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeWarren) readFile(w http.ResponseWriter, r *http.Request, id string) {
	f.mu.Lock()
	data, ok := f.files[id+":"+r.URL.Query().Get("path")]
	f.mu.Unlock()
	if !ok {
		fail(w, api.Errorf(api.CodeNotFound, "%s not found", r.URL.Query().Get("path")))
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}

func (f *fakeWarren) writeFile(w http.ResponseWriter, r *http.Request, id string) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	p := r.URL.Query().Get("path")
	f.mu.Lock()
	f.files[id+":"+p] = data
	f.fileModes[id+":"+p] = r.URL.Query().Get("mode")
	f.mu.Unlock()
	answer(w, 200, fakeInfo(p, len(data)))
}

func fakeInfo(p string, size int) api.FileInfo {
	return api.FileInfo{Name: path.Base(p), Path: p, Type: "file", Size: int64(size), Mode: 0o644, Permissions: "-rw-r--r--",
		Owner: "root", Group: "root", ModifiedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
}

func (f *fakeWarren) stat(w http.ResponseWriter, r *http.Request, id string) {
	p := r.URL.Query().Get("path")
	f.mu.Lock()
	data, ok := f.files[id+":"+p]
	f.mu.Unlock()
	if !ok {
		fail(w, api.Errorf(api.CodeNotFound, "%s not found", p))
		return
	}
	answer(w, 200, fakeInfo(p, len(data)))
}

func (f *fakeWarren) listFiles(w http.ResponseWriter, r *http.Request, id string) {
	dir := strings.TrimSuffix(r.URL.Query().Get("path"), "/") + "/"
	f.mu.Lock()
	defer f.mu.Unlock()
	entries := []api.FileInfo{}
	for key, data := range f.files {
		if p, ok := strings.CutPrefix(key, id+":"); ok && strings.HasPrefix(p, dir) {
			entries = append(entries, fakeInfo(p, len(data)))
		}
	}
	slices.SortFunc(entries, func(a, b api.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	answer(w, 200, map[string]any{"entries": entries})
}

func (f *fakeWarren) mkdir(w http.ResponseWriter, r *http.Request, id string) {
	var req api.MkdirRequest
	json.NewDecoder(r.Body).Decode(&req)
	fi := fakeInfo(req.Path, 4096)
	fi.Type, fi.Mode = "dir", req.Mode
	answer(w, 200, fi)
}

func (f *fakeWarren) move(w http.ResponseWriter, r *http.Request, id string) {
	var req api.MoveRequest
	json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	defer f.mu.Unlock()
	data, ok := f.files[id+":"+req.Source]
	if !ok {
		fail(w, api.Errorf(api.CodeNotFound, "%s not found", req.Source))
		return
	}
	delete(f.files, id+":"+req.Source)
	f.files[id+":"+req.Destination] = data
	answer(w, 200, fakeInfo(req.Destination, len(data)))
}

func (f *fakeWarren) removeFile(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removes = append(f.removes, q.Get("path")+" recursive="+q.Get("recursive"))
	delete(f.files, id+":"+q.Get("path"))
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeWarren) templates(w http.ResponseWriter, r *http.Request) {
	answer(w, 200, map[string]any{"templates": []api.Template{{Name: "default", SizeBytes: 1 << 30, UsedBytes: 300 << 20,
		BuiltAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}}})
}

func (f *fakeWarren) build(w http.ResponseWriter, r *http.Request) {
	enc := json.NewEncoder(w)
	enc.Encode(api.TemplateBuildEvent{Progress: "debootstrap bookworm"})
	enc.Encode(api.TemplateBuildEvent{Progress: "mkfs.ext4"})
	enc.Encode(api.TemplateBuildEvent{Template: &api.Template{Name: r.PathValue("name")}})
}
