//go:build linux

package agent_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"warren/internal/agent"
	"warren/internal/agent/agenttest"
	processpb "warren/internal/agent/pb/process"
	"warren/internal/agent/pb/process/processpbconnect"
	"warren/internal/agentconn"
)

// startRaw posts a Start of req to the agent at sock in the connect
// protocol, by hand, and returns the answer as it came.
func startRaw(t *testing.T, sock string, req *processpb.StartRequest) *http.Response {
	t.Helper()
	msg, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	r, err := http.NewRequest(http.MethodPost, "http://agent"+processpbconnect.ProcessStartProcedure, strings.NewReader(string(append(body, msg...))))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/connect+proto")
	resp, err := hc.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("start answered %s", resp.Status)
	}
	return resp
}

// readEvent reads one envelope of a Start stream.
func readEvent(t *testing.T, br *bufio.Reader) *processpb.ProcessEvent {
	t.Helper()
	var head [5]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(br, msg); err != nil {
		t.Fatal(err)
	}
	var resp processpb.StartResponse
	if err := proto.Unmarshal(msg, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.GetEvent()
}

// A process that ends within the start hold is answered in one piece:
// start, end and the end of the stream written together (net/http then
// sends a length, not chunks). One that runs on gets its start event while
// it runs.
func TestStartCoalesces(t *testing.T) {
	long, _ := agenttest.Listen(t, agent.Options{StartHold: time.Minute})
	quick := startRaw(t, long, cmd("true"))
	if quick.ContentLength < 0 || len(quick.TransferEncoding) > 0 {
		t.Errorf("a quick process's events came in chunks (%v), not in one write", quick.TransferEncoding)
	}
	br := bufio.NewReader(quick.Body)
	if ev := readEvent(t, br); ev.GetStart() == nil {
		t.Fatalf("first event %v, want start", ev)
	}
	if ev := readEvent(t, br); ev.GetEnd().GetExitCode() != 0 {
		t.Fatalf("second event %v, want the end", ev)
	}

	sock, _ := agenttest.Listen(t, agent.Options{})
	slow := startRaw(t, sock, cmd("sleep", "60"))
	ev := readEvent(t, bufio.NewReader(slow.Body))
	pid := ev.GetStart().GetPid()
	if pid == 0 {
		t.Fatalf("first event %v, want start", ev)
	}
	conn := agentconn.DialUnix(sock)
	defer conn.Close()
	list, err := conn.Process.List(context.Background(), connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid && !p.GetRunning() {
			t.Errorf("the start event of process %d came after it ended", pid)
		}
	}
	if _, err := conn.Process.SendSignal(context.Background(), connect.NewRequest(&processpb.SendSignalRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}, Signal: processpb.Signal_SIGNAL_SIGKILL,
	})); err != nil {
		t.Fatal(err)
	}
}
