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
func Remote(member *pki.Member, node, addr string, log *slog.Logger, writeError func(http.ResponseWriter, *http.Request, error)) http.Handler {
	target := &url.URL{Scheme: "https", Host: addr}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
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
