package agentconn

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	processpb "warren/internal/agent/pb/process"
	"warren/internal/agent/pb/process/processpbconnect"
)

// fakeAgent serves h and returns a Conn to it.
func fakeAgent(t *testing.T, h http.Handler) *Conn {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	c := New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
	t.Cleanup(c.Close)
	return c
}

func TestFileErrorsAreConnectErrors(t *testing.T) {
	for _, tt := range []struct {
		status int
		body   string
		code   connect.Code
		msg    string
	}{
		{404, `{"code":"not_found","message":"read /x: no such file or directory"}`, connect.CodeNotFound, "read /x: no such file or directory"},
		{409, `{"code":"failed_precondition","message":"is a directory"}`, connect.CodeFailedPrecondition, "is a directory"},
		{400, `not json`, connect.CodeInvalidArgument, "400 Bad Request"},
		{403, `{"code":"no_such_code"}`, connect.CodePermissionDenied, "403 Forbidden"},
		{500, ``, connect.CodeInternal, "500 Internal Server Error"},
	} {
		c := fakeAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/files" || r.URL.Query().Get("path") != "/x" {
				t.Errorf("request %s", r.URL)
			}
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(tt.status)
			io.WriteString(w, tt.body)
		}))
		_, _, err := c.ReadFile(context.Background(), "/x", "")
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != tt.code || ce.Message() != tt.msg {
			t.Errorf("ReadFile with %d %s: %v, want %v %q", tt.status, tt.body, err, tt.code, tt.msg)
		}
		_, err = c.WriteFile(context.Background(), "/x", 0o644, "", strings.NewReader("data"))
		if !errors.As(err, &ce) || ce.Code() != tt.code {
			t.Errorf("WriteFile with %d %s: %v, want %v", tt.status, tt.body, err, tt.code)
		}
	}
}

func TestWriteFileSendsModeAndUser(t *testing.T) {
	c := fakeAgent(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPut || q.Get("mode") != "4750" || q.Get("user") != "alice" || string(body) != "data" {
			t.Errorf("%s %s body %q", r.Method, r.URL, body)
		}
		io.WriteString(w, `{"name":"x","path":"/x","size":"4","permissions":"-rwsr-x---","futureField":1}`)
	}))
	e, err := c.WriteFile(context.Background(), "/x", 0o750|fs.ModeSetuid, "alice", strings.NewReader("data"))
	if err != nil {
		t.Fatal(err)
	}
	if e.GetSize() != 4 || e.GetPermissions() != "-rwsr-x---" {
		t.Errorf("entry %v", e)
	}
}

func TestRunWithoutEnd(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(endlessProcess{}))
	c := fakeAgent(t, mux)
	var out strings.Builder
	_, pid, err := c.Run(context.Background(), &processpb.StartRequest{}, &out, nil)
	if connect.CodeOf(err) != connect.CodeUnavailable || pid != 42 || out.String() != "partial" {
		t.Errorf("Run: pid %d out %q err %v", pid, out.String(), err)
	}
}

func TestWaitReadyGivesUp(t *testing.T) {
	c := New(func(ctx context.Context) (net.Conn, error) { return nil, errors.New("no agent yet") })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady: %v", err)
	}
}

// endlessProcess is a process service whose Start stream breaks off before
// the end event.
type endlessProcess struct {
	processpbconnect.UnimplementedProcessHandler
}

func (endlessProcess) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
	s.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}}})
	s.Send(&processpb.StartResponse{Event: &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{
		Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("partial")},
	}}}})
	return nil
}
