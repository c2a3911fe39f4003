// Package agentconn is the node's side of warren's guest agent: typed
// clients of its services, file transfer, readiness and a convenience to run
// a command, over any transport that yields a net.Conn (a unix socket, vsock,
// a virtio-serial port bridged to a socket).
//
// The agent runs inside the sandbox, whose code is hostile: what comes back
// is bounded (message sizes, error bodies) and never trusted for more than
// what it says. This package does not know about sandboxes or runtimes; the
// caller hands it a dialer.
package agentconn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	controlpb "warren/internal/agent/pb/control"
	"warren/internal/agent/pb/control/controlpbconnect"
	filesystempb "warren/internal/agent/pb/filesystem"
	"warren/internal/agent/pb/filesystem/filesystempbconnect"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agent/pb/process/processpbconnect"
	"warren/internal/backoff"
	"warren/internal/unixmode"
)

const (
	// baseURL is what the clients address; the dialer decides where it goes.
	baseURL = "http://agent"
	// maxMessage bounds one message from the agent.
	maxMessage = 64 << 20
	// maxSmallBody bounds a JSON answer of /files (an error or an entry).
	maxSmallBody = 1 << 20
)

// Conn talks to one agent. Its methods and clients may be used concurrently.
type Conn struct {
	// Process is the agent's process service. From New, StreamInput goes
	// over unencrypted HTTP/2 (client streaming needs it) and the other
	// calls over pooled keep-alive HTTP/1.1 connections; from NewH2C,
	// everything goes over its one HTTP/2 connection.
	Process processpbconnect.ProcessClient
	// Filesystem is the agent's filesystem service.
	Filesystem filesystempbconnect.FilesystemClient
	// Control is the agent's control service.
	Control controlpbconnect.ControlClient

	// files carries file transfers and forwarded calls; streaming carries
	// forwarded client streams.
	files, streaming *http.Client
	closeIdle        func()
}

// New makes a Conn whose connections come from dial, which may be called
// for as many connections as there are calls at once (a socket that accepts
// many). No connection is made until the first call.
func New(dial func(ctx context.Context) (net.Conn, error)) *Conn {
	dialContext := func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	http1 := &http.Transport{
		DialContext:         dialContext,
		Protocols:           &p1,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	h2c := &http.Transport{
		DialContext:        dialContext,
		Protocols:          &p2,
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true,
	}
	return newConn(&http.Client{Transport: http1}, &http.Client{Transport: h2c}, func() {
		http1.CloseIdleConnections()
		h2c.CloseIdleConnections()
	})
}

// newConn makes a Conn whose client streaming goes over streaming and the
// rest over c; closeIdle is its Close.
func newConn(c, streaming *http.Client, closeIdle func()) *Conn {
	opts := []connect.ClientOption{
		connect.WithReadMaxBytes(maxMessage),
		// The link is local: compressing costs CPU on both ends for nothing.
		connect.WithAcceptCompression("gzip", nil, nil),
	}
	return &Conn{
		Process: processClient{
			ProcessClient: processpbconnect.NewProcessClient(c, baseURL, opts...),
			streaming:     processpbconnect.NewProcessClient(streaming, baseURL, opts...),
		},
		Filesystem: filesystempbconnect.NewFilesystemClient(c, baseURL, opts...),
		Control:    controlpbconnect.NewControlClient(c, baseURL, opts...),
		files:      c,
		streaming:  streaming,
		closeIdle:  closeIdle,
	}
}

// DialUnix makes a Conn to an agent listening on the unix socket at path.
func DialUnix(path string) *Conn {
	return New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	})
}

// Close drops the idle connections. Calls in flight go on. A later call
// connects again.
func (c *Conn) Close() { c.closeIdle() }

// processClient routes StreamInput over HTTP/2 and the rest over HTTP/1.1.
type processClient struct {
	processpbconnect.ProcessClient
	streaming processpbconnect.ProcessClient
}

func (p processClient) StreamInput(ctx context.Context) *connect.ClientStreamForClient[processpb.StreamInputRequest, processpb.StreamInputResponse] {
	return p.streaming.StreamInput(ctx)
}

func filesURL(q url.Values) string { return baseURL + "/files?" + q.Encode() }

// Forward sends the agent a call that a client of the agent's protocol
// made: method and path ("/process.Process/Start") as the client sent
// them, with header and body, and returns the agent's answer, streaming;
// the caller closes its body. It goes over the transport the typed
// clients use for that kind of call. The caller decides which paths may
// be forwarded and which headers: the agent trusts every call it gets.
func (c *Conn) Forward(ctx context.Context, method, path string, header http.Header, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, baseURL+path, body)
	if err != nil {
		return nil, fmt.Errorf("forward %s: %w", path, err)
	}
	req.Header = header
	client := c.files
	if strings.HasSuffix(path, "/StreamInput") {
		client = c.streaming
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("forward %s: %w", path, err))
	}
	return resp, nil
}

// ReadFile streams the file at path (absolute, or relative to user's home;
// empty user means root) and its size. The caller closes the reader. Errors
// are *connect.Error with the agent's code.
func (c *Conn) ReadFile(ctx context.Context, path, user string) (io.ReadCloser, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, filesURL(url.Values{"path": {path}, "user": {user}}), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("read file: %w", err)
	}
	resp, err := c.files.Do(req)
	if err != nil {
		return nil, 0, connect.NewError(connect.CodeUnavailable, fmt.Errorf("read file: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, 0, fileError(resp)
	}
	return resp.Body, resp.ContentLength, nil
}

// WriteFile streams body into the file at path, atomically replacing it,
// with mode (permission, setuid, setgid and sticky bits) and owned by user
// (empty means root); missing parents are made. It answers the new file's
// entry. Errors are *connect.Error with the agent's code.
func (c *Conn) WriteFile(ctx context.Context, path string, mode fs.FileMode, user string, body io.Reader) (*filesystempb.EntryInfo, error) {
	if body == nil {
		body = http.NoBody
	}
	q := url.Values{"path": {path}, "mode": {strconv.FormatUint(uint64(unixmode.FromFileMode(mode)), 8)}, "user": {user}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, filesURL(q), body)
	if err != nil {
		return nil, fmt.Errorf("write file: %w", err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.files.Do(req)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("write file: %w", err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fileError(resp)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxSmallBody))
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("write file: read answer: %w", err))
	}
	entry := &filesystempb.EntryInfo{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, entry); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("write file: decode answer: %w", err))
	}
	return entry, nil
}

// fileError turns an error answer of /files into a *connect.Error: the code
// named in the JSON body, else the one of the HTTP status.
func fileError(resp *http.Response) error {
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxSmallBody))
	var code connect.Code
	if json.Unmarshal(data, &body) != nil || code.UnmarshalText([]byte(body.Code)) != nil {
		code = statusCode(resp.StatusCode)
	}
	if body.Message == "" {
		body.Message = resp.Status
	}
	return connect.NewError(code, errors.New(body.Message))
}

func statusCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest:
		return connect.CodeInvalidArgument
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusConflict:
		return connect.CodeFailedPrecondition
	case http.StatusInsufficientStorage, http.StatusRequestEntityTooLarge:
		return connect.CodeResourceExhausted
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return connect.CodeUnimplemented
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return connect.CodeUnavailable
	}
	return connect.CodeInternal
}

// WaitReady polls Info with a short backoff until the agent answers or ctx
// ends.
func (c *Conn) WaitReady(ctx context.Context) error {
	var err error
	if backoff.Poll(ctx, backoff.Backoff{Base: 2 * time.Millisecond, Max: 100 * time.Millisecond}, func() (bool, error) {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err = c.Control.Info(attempt, connect.NewRequest(&controlpb.InfoRequest{}))
		return err == nil, nil
	}) != nil {
		return fmt.Errorf("wait for agent: %w (last: %v)", ctx.Err(), err)
	}
	return nil
}

// Run starts req's process, copies its output into stdout and stderr (either
// may be nil to drop it) as it comes, and returns its end and pid. A command
// that cannot be executed is not an error: it ends with code 127 or 126 and
// pid 0. If ctx ends first, the process goes on running in the sandbox.
func (c *Conn) Run(ctx context.Context, req *processpb.StartRequest, stdout, stderr io.Writer) (*processpb.ProcessEvent_EndEvent, uint32, error) {
	stream, err := c.Process.Start(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, 0, err
	}
	defer stream.Close()
	var pid uint32
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().GetEvent().(type) {
		case *processpb.ProcessEvent_Start:
			pid = ev.Start.GetPid()
		case *processpb.ProcessEvent_Data:
			var w io.Writer
			var data []byte
			switch out := ev.Data.GetOutput().(type) {
			case *processpb.ProcessEvent_DataEvent_Stdout:
				w, data = stdout, out.Stdout
			case *processpb.ProcessEvent_DataEvent_Stderr:
				w, data = stderr, out.Stderr
			}
			if w != nil && len(data) > 0 {
				if _, err := w.Write(data); err != nil {
					return nil, pid, fmt.Errorf("run: copy output: %w", err)
				}
			}
		case *processpb.ProcessEvent_End:
			return ev.End, pid, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, pid, err
	}
	return nil, pid, connect.NewError(connect.CodeUnavailable, errors.New("run: stream ended before the process"))
}
