//go:build linux

package agentconn

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"warren/internal/agent"
	"warren/internal/agent/agenttest"
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
func startH2CAgent(t testing.TB) (*Conn, *oneClient) {
	return startH2CAgentWindow(t, h2cStreamWindow)
}

// startH2CAgentWindow is startH2CAgent with a stream receive window of
// window bytes (0: HTTP/2's default).
func startH2CAgentWindow(t testing.TB, window int) (*Conn, *oneClient) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := &oneClient{Listener: ul, free: make(chan struct{}, 1)}
	l.free <- struct{}{}
	agenttest.Serve(t, agent.Options{}, l)
	conn := newH2C(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}, window)
	t.Cleanup(conn.Close)
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

// TestH2CStalledStreamsHoldLittle: streams whose reader stopped hold at
// most a small receive window each on the client side (the daemon), not
// HTTP/2's default 4 MiB: 256 stalled streams to a VM's agent, the most
// the daemon lets one sandbox have, would otherwise take 1 GiB of the
// daemon's memory.
func TestH2CStalledStreamsHoldLittle(t *testing.T) {
	conn, _ := startH2CAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, bytes.Repeat([]byte{'x'}, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	const streams = 16
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var bodies []io.ReadCloser
	for range streams {
		r, _, err := conn.ReadFile(ctx, p, "")
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, r)
	}
	defer func() {
		for _, r := range bodies {
			r.Close()
		}
	}()
	time.Sleep(time.Second) // the agent sends what the windows let it
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap grew %d KiB with %d stalled 8 MiB streams", grew>>10, streams)
	if limit := int64(streams) * (1 << 20); grew > limit {
		t.Errorf("heap grew %d MiB with %d stalled streams, over %d MiB", grew>>20, streams, limit>>20)
	}
	// They still deliver everything once read.
	if got, err := io.ReadAll(bodies[0]); err != nil || len(got) != 8<<20 {
		t.Errorf("a stalled stream read on: %d bytes, %v", len(got), err)
	}
}

// BenchmarkH2CDownload reads a 32 MiB file over h2c with the bounded
// stream window against HTTP/2's default one, in the same run.
func BenchmarkH2CDownload(b *testing.B) {
	p := filepath.Join(b.TempDir(), "big")
	if err := os.WriteFile(p, bytes.Repeat([]byte{'x'}, 32<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, w := range []struct {
		name   string
		window int
	}{{"window=256KiB", h2cStreamWindow}, {"window=default-4MiB", 0}} {
		b.Run(w.name, func(b *testing.B) {
			conn, _ := startH2CAgentWindow(b, w.window)
			b.SetBytes(32 << 20)
			for b.Loop() {
				r, _, err := conn.ReadFile(context.Background(), p, "")
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, r); err != nil || n != 32<<20 {
					b.Fatalf("read %d bytes: %v", n, err)
				}
				r.Close()
			}
		})
	}
}
