//go:build linux

package agentconn

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"warren/internal/agent"
	controlpb "warren/internal/agent/pb/control"
	processpb "warren/internal/agent/pb/process"
)

// oneClient is a listener that serves one connection at a time, as QEMU's
// chardev socket does: Accept waits until the previous one is closed. A
// client that dials again without closing first waits forever.
type oneClient struct {
	net.Listener
	free chan struct{} // holds a token while no conn is open

	mu       sync.Mutex // guards cur and accepted
	cur      net.Conn
	accepted int
}

func (l *oneClient) Accept() (net.Conn, error) {
	<-l.free
	c, err := l.Listener.Accept()
	if err != nil {
		l.free <- struct{}{}
		return nil, err
	}
	oc := &onceClosed{Conn: c, l: l}
	l.mu.Lock()
	l.cur = oc
	l.accepted++
	l.mu.Unlock()
	return oc, nil
}

func (l *oneClient) stats() (net.Conn, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur, l.accepted
}

type onceClosed struct {
	net.Conn
	l    *oneClient
	once sync.Once
}

func (c *onceClosed) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.free <- struct{}{} })
	return err
}

// startH2CAgent serves a real agent on a one-client unix socket and returns
// a NewH2C Conn to it.
func startH2CAgent(t *testing.T) (*Conn, *oneClient) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := &oneClient{Listener: ul, free: make(chan struct{}, 1)}
	l.free <- struct{}{}
	srv := agent.New(agent.Options{}, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	conn := NewH2C(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(func() {
		conn.Close()
		cancel()
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := conn.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	return conn, l
}

func TestH2COneConnectionForEverything(t *testing.T) {
	conn, l := startH2CAgent(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 16 {
		wg.Go(func() {
			if _, err := conn.Control.Info(ctx, connect.NewRequest(&controlpb.InfoRequest{})); err != nil {
				errs <- fmt.Errorf("info: %w", err)
				return
			}
			p := filepath.Join(dir, fmt.Sprintf("f%d", i))
			want := bytes.Repeat([]byte{byte(i)}, 200<<10) // several frames and flow-control windows
			if _, err := conn.WriteFile(ctx, p, 0o644, "", bytes.NewReader(want)); err != nil {
				errs <- fmt.Errorf("write: %w", err)
				return
			}
			r, _, err := conn.ReadFile(ctx, p, "")
			if err != nil {
				errs <- fmt.Errorf("read: %w", err)
				return
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Errorf("read back %s: %d bytes, %v", p, len(got), err)
			}
			if os.Geteuid() == 0 {
				var out strings.Builder
				end, _, err := conn.Run(ctx, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/echo", Args: []string{"hi"}}}, &out, nil)
				if err != nil || end.GetExitCode() != 0 || out.String() != "hi\n" {
					errs <- fmt.Errorf("run: %v %v %q", end, err, out.String())
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, n := l.stats(); n != 1 {
		t.Errorf("agent accepted %d connections, want 1", n)
	}
}

func TestH2CRedialsABrokenConnection(t *testing.T) {
	conn, l := startH2CAgent(t)
	cur, _ := l.stats()
	cur.Close() // the agent's end goes away, as when the VM's port is reset
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := conn.WaitReady(ctx); err != nil {
		t.Fatalf("after the connection broke: %v", err)
	}
	if _, n := l.stats(); n != 2 {
		t.Errorf("agent accepted %d connections, want 2", n)
	}
	// Close drops the idle connection: the agent's end sees it go, so the
	// one-client socket takes the next.
	conn.Close()
	if err := conn.WaitReady(ctx); err != nil {
		t.Fatalf("after Close: %v", err)
	}
	if _, n := l.stats(); n != 3 {
		t.Errorf("agent accepted %d connections, want 3", n)
	}
}
