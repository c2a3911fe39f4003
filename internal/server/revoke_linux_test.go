//go:build linux

package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"

	"warren/api"
)

// noEvents is an Events that never has one: its streams only wait.
type noEvents struct{}

func (noEvents) Events(context.Context, EventFilter) ([]api.Event, error) { return nil, nil }
func (noEvents) Bounds(context.Context, string) (int64, int64, error)     { return 0, 0, nil }
func (noEvents) Changed() <-chan struct{}                                 { return nil }

// readEnd reports, on the channel it returns, when reading body ends.
func readEnd(body io.Reader) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(io.Discard, body)
	}()
	return done
}

// endsWithin fails t unless done is closed within d.
func endsWithin(t *testing.T, what string, done <-chan struct{}, d time.Duration) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Errorf("%s still open %v after its key was revoked", what, d)
	}
}

// TestRevokedKeyEndsWhatItOpened (issue 35, row 9): revoking a key ends
// the terminal, the events stream and the exec stream it opened, at once
// on the node that revoked it and within the revocation poll on another
// (here: the key deleted from the store behind the server's back, as a
// fleet's other node does); another tenant's stream goes on.
func TestRevokedKeyEndsWhatItOpened(t *testing.T) {
	for _, c := range []struct {
		name   string
		revoke func(e *testEnv)
		within time.Duration
	}{
		{"here", func(e *testEnv) { e.call("DELETE", "/v1/keys/key-1", e.admin, nil, http.StatusNoContent, nil) }, time.Second},
		{"on another node", func(e *testEnv) { e.keys.deleteTenant("a") }, revocationPoll + 2*time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, box := newAgentEnv(t, Options{Events: noEvents{}})
			ctx := t.Context()
			ws := dialTerminal(t, e, box, e.keyA, "cols=80&rows=24")
			term := make(chan struct{})
			go func() {
				defer close(term)
				for {
					if _, _, err := ws.Read(ctx); err != nil {
						return
					}
				}
			}()
			events := e.doCtx(ctx, "GET", "/v1/events", e.keyA, nil)
			defer events.Body.Close()
			exec := e.doCtx(ctx, "POST", box+"/exec", e.keyA, api.ExecRequest{Cmd: []string{"sleep", "60"}, Stream: true})
			defer exec.Body.Close()
			other := e.doCtx(ctx, "GET", "/v1/events", e.keyB, nil)
			defer other.Body.Close()
			for _, resp := range []*http.Response{events, exec, other} {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s %s: %d", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode)
				}
			}
			evDone, execDone, otherDone := readEnd(events.Body), readEnd(exec.Body), readEnd(other.Body)
			send(t, ws, websocket.MessageBinary, "echo ready\n")

			c.revoke(e)
			endsWithin(t, "the terminal", term, c.within)
			endsWithin(t, "the events stream", evDone, c.within)
			endsWithin(t, "the exec stream", execDone, c.within)
			select {
			case <-otherDone:
				t.Error("another tenant's events stream ended too")
			default:
			}
			if resp := e.do("GET", "/v1/info", e.keyA, nil); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("a request with the revoked key: %d, want 401", resp.StatusCode)
			}
		})
	}
}

// TestRotateAgentTokens (issue 35, row 9): rotating a tenant's agent
// tokens gives its sandboxes new ones, the old ones open nothing, and a
// call the old token had open (an upload still streaming) ends.
func TestRotateAgentTokens(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	var sb api.Sandbox
	e.call("GET", box, e.keyA, nil, http.StatusOK, &sb)
	old := sb.AgentToken

	// An upload that is still streaming its body.
	up := e.dialRaw()
	fmt.Fprintf(up, "POST %s/agent/files?path=%s HTTP/1.1\r\nHost: x\r\nX-Access-Token: %s\r\n"+
		"Content-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\nsome bytes",
		box, filepath.Join(t.TempDir(), "f"), old)

	var res api.RotateAgentTokensResult
	e.call("POST", "/v1/tenants/b/rotate-agent-tokens", e.keyA, nil, http.StatusForbidden, nil)
	e.call("POST", "/v1/tenants/a/rotate-agent-tokens", e.admin, nil, http.StatusOK, &res)
	if res.Tenant != "a" || len(res.Sandboxes) != 1 || res.Sandboxes[0] != sb.ID {
		t.Errorf("rotation answered %+v, want tenant a's one sandbox", res)
	}
	if !closedWithin(up, time.Second) {
		t.Error("an upload under the old agent token still open 1s after the rotation")
	}

	e.call("GET", box, e.keyA, nil, http.StatusOK, &sb)
	if sb.AgentToken == "" || sb.AgentToken == old {
		t.Fatalf("agent token after the rotation %q, want a new one", sb.AgentToken)
	}
	for token, want := range map[string]int{old: http.StatusUnauthorized, sb.AgentToken: http.StatusNoContent} {
		status, _, _ := e.agentRequest("GET", box+"/agent/health", map[string]string{"X-Access-Token": token}, nil)
		if status != want {
			t.Errorf("health with the %s token: %d, want %d", map[bool]string{true: "old", false: "new"}[token == old], status, want)
		}
	}
}
