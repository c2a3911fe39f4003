//go:build linux

package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"

	controlpb "warren/internal/agent/pb/control"
	"warren/internal/agent/pb/control/controlpbconnect"
)

// Warm pages in the code a first request runs — accepting on a unix socket,
// the HTTP server, Connect, protobuf — by sending one Info call to the
// server through a socket in the abstract namespace of its own network
// namespace. It touches no file and starts no process, so the container
// init can run it before the sandbox's root exists; the first real request
// then does not pay for the page faults. Warm is best effort: it reports
// nothing.
func (s *Server) Warm() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr := fmt.Sprintf("@warren-agent-warm-%d-%d", os.Getpid(), time.Now().UnixNano())
	l, err := net.Listen("unix", addr)
	if err != nil {
		return
	}
	go s.Serve(ctx, l) // stops when ctx is cancelled
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		},
	}}
	defer hc.CloseIdleConnections()
	controlpbconnect.NewControlClient(hc, "http://warm").Info(ctx, connect.NewRequest(&controlpb.InfoRequest{}))
}
