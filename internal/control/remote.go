package control

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"warren/api"
	"warren/internal/pki"
	"warren/internal/reqid"
)

// Remote returns the API of node, served at addr (host:port), reached
// over the fleet's mutual TLS as member: the node takes only control
// replicas, and the front only the node it meant (pki). Requests go on
// as they came, Host included (a preview host name routes on it), and
// answers come back as the node writes them: every flush of a stream is
// passed on at once, and a slow reader slows the node (each hop's TCP
// window). An error before the node answers is writeError's to send.
// HTTP/1.1, so that an upgraded connection (a WebSocket to an
// exposed port) goes through too.
//
// A request keeps the ID the replica gave it (package reqid): it goes to
// the node in reqid.FleetHeader, which the node takes from a control
// replica alone, and the node's own X-Request-Id is left out of the
// answer, which already carries the replica's.
func Remote(member *pki.Member, node, addr string, log *slog.Logger, writeError func(http.ResponseWriter, *http.Request, error)) http.Handler {
	target := &url.URL{Scheme: "https", Host: addr}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			// Whatever the caller sent in it, the header is the replica's.
			pr.Out.Header.Del(reqid.FleetHeader)
			if id := reqid.From(pr.In.Context()); id != "" {
				pr.Out.Header.Set(reqid.FleetHeader, id)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del(reqid.Header)
			return nil
		},
		Transport: &http.Transport{
			TLSClientConfig:     member.ClientConfig(pki.Identity{Role: pki.Node, Name: node}),
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("node did not answer", "node", node, "method", r.Method, "path", r.URL.Path, "err", err)
			writeError(w, r, api.Errorf(api.CodeUnavailable, "node %s did not answer", node))
		},
	}
}
