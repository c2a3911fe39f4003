package server

import (
	"cmp"
	"crypto/subtle"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"strings"

	"warren/api"
	"warren/internal/ident"
)

// Preview host names (docs/API.md, "Exposed ports"): with a preview domain,
// a request whose Host is PORT-ID.<domain> goes to that port of that
// sandbox, whatever its path, before the API's routes. It has no API key
// (a preview host is for browsers and for links people share, and looks
// like a third party's site: the API key is never asked for there).
// Access is the sandbox's own: anyone when its previews are public, else
// its access token, from the X-Warren-Access-Token header, the warren_token
// query parameter or the access cookie. A GET carrying a good token in its
// query is answered with a page that sets the cookie and goes on at once to
// the same URL without the token (Refresh), so a shared link keeps working
// in a browser. The cookie is for that host only, HttpOnly and
// SameSite=Strict, and where previews are https it is Secure and named
// __Host-warren_token, which no sibling host can set. A Strict cookie is
// not sent on a cross-site redirect, which is why the page goes on by
// itself (a same-site navigation) rather than by a 302. An unknown sandbox
// and a wrong token get the same 401.
//
// The domain itself (no port-id label) is not a preview host: the API may
// be served there. Any other name under it is, and one that does not parse
// is a 404: the API is never served on a name under the preview domain.

// previewSite is the parsed Options.PreviewDomain; its zero value serves
// no previews.
type previewSite struct {
	domain string // lower case, without a trailing dot: "preview.example.com"
	scheme string // of preview URLs: "https" unless the option gave a URL
	port   string // of preview URLs; "" for the scheme's default
}

// PreviewHost is the preview domain as a host name and its port when not
// the scheme's default ("preview.example.com", "localhost:7777"); "" when
// the server has none.
func (s *Server) PreviewHost() string {
	if s.preview.domain == "" || s.preview.port == "" {
		return s.preview.domain
	}
	return s.preview.domain + ":" + s.preview.port
}

// CheckPreviewDomain reports whether v is a valid Options.PreviewDomain
// (`warren server --preview-domain`), and why not.
func CheckPreviewDomain(v string) error {
	_, err := parsePreviewDomain(v)
	return err
}

// parsePreviewDomain reads a preview domain: a domain name, or an http or
// https URL with a domain name, an optional port, and nothing else.
func parsePreviewDomain(v string) (previewSite, error) {
	site := previewSite{scheme: "https"}
	host := v
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		if err != nil {
			return previewSite{}, fmt.Errorf("preview domain %q: %v", v, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return previewSite{}, fmt.Errorf("preview domain %q: the scheme must be http or https", v)
		}
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return previewSite{}, fmt.Errorf("preview domain %q: want scheme://domain[:port] and nothing more", v)
		}
		if p := u.Port(); p != "" {
			if _, err := parsePort(p); err != nil {
				return previewSite{}, fmt.Errorf("preview domain %q: bad port %q", v, p)
			}
		}
		site.scheme, site.port, host = u.Scheme, u.Port(), u.Hostname()
	} else if strings.Contains(v, ":") {
		return previewSite{}, fmt.Errorf("preview domain %q: give a port as a URL, e.g. http://%s", v, v)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if err := checkDomainName(host); err != nil {
		return previewSite{}, fmt.Errorf("preview domain %q: %v", v, err)
	}
	site.domain = host
	return site, nil
}

// maxPreviewLabel is the longest first label of a preview host:
// "65535-sb-" and 20 base32 characters.
const maxPreviewLabel = len("65535-sb-") + 20

// checkDomainName refuses what cannot be a DNS name with preview hosts
// below it: IP addresses, bad labels, and names too long to take the
// PORT-ID label.
func checkDomainName(host string) error {
	switch {
	case host == "":
		return errors.New("empty domain")
	case net.ParseIP(host) != nil:
		return errors.New("an IP address has no names below it: want a domain")
	case len(host)+1+maxPreviewLabel > 253:
		return errors.New("too long to have PORT-ID names below it")
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("bad label %q", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("bad label %q: letters, digits and '-' only", label)
			}
		}
	}
	return nil
}

// urlTemplate is a sandbox's preview URL with "{port}" for the port; nil
// without a preview domain.
func (p previewSite) urlTemplate(id string) *string {
	if p.domain == "" {
		return nil
	}
	host := "{port}-" + id + "." + p.domain
	if p.port != "" {
		host += ":" + p.port
	}
	u := p.scheme + "://" + host + "/"
	return &u
}

// hostKind is what a request's Host is to the preview proxy.
type hostKind int

const (
	notPreview hostKind = iota // not under the preview domain: the API's
	badPreview                 // under it, but no PORT-ID label: 404
	isPreview                  // PORT-ID.<domain>
)

// parseHost reads a request's Host as a preview host name: PORT-ID.<domain>,
// PORT in decimal from 1 to 65535 without leading zeros, ID a sandbox ID,
// in any case (DNS names are), with an optional trailing dot and port.
func (p previewSite) parseHost(host string) (port int, id string, kind hostKind) {
	if p.domain == "" || host == "" || host[0] == '[' {
		return 0, "", notPreview
	}
	name, hostPort, hasPort := strings.Cut(host, ":")
	name = strings.TrimSuffix(asciiLower(name), ".")
	label, under := strings.CutSuffix(name, "."+p.domain)
	if !under {
		return 0, "", notPreview
	}
	if hasPort && strings.Trim(hostPort, "0123456789") != "" {
		return 0, "", badPreview
	}
	portText, id, ok := strings.Cut(label, "-")
	if !ok || strings.Contains(label, ".") || !ident.Valid(id, "sb-") {
		return 0, "", badPreview
	}
	port, err := parsePort(portText)
	if err != nil {
		return 0, "", badPreview
	}
	return port, id, isPreview
}

// asciiLower lower-cases the ASCII letters of s and nothing else: no
// Unicode folding ("\u212a", the Kelvin sign, is no "k") may turn a
// foreign name into a sandbox's.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// servePreviewHost serves r if its Host is under the preview domain and
// reports whether it did.
func (s *Server) servePreviewHost(w http.ResponseWriter, r *http.Request) bool {
	port, id, kind := s.preview.parseHost(r.Host)
	switch kind {
	case notPreview:
		return false
	case badPreview:
		s.WriteError(w, r, api.Errorf(api.CodeNotFound, "no sandbox port at this host name: preview hosts are PORT-SANDBOX.%s", s.preview.domain))
		return true
	}
	streamBody(r)
	if err := s.servePreview(w, r, port, id); err != nil {
		s.WriteError(w, r, err)
	}
	return true
}

// errPreviewDenied answers a preview request without access: the same for
// an unknown sandbox and a wrong or missing token.
var errPreviewDenied = api.Errorf(api.CodeUnauthorized,
	"this preview needs the sandbox's access token: header "+tokenHeader+", query parameter "+tokenParam+", or its cookie")

// servePreview checks the access to the port of sandbox id and proxies r
// there.
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request, port int, id string) error {
	tenant, token, public, err := s.sb.PreviewAccess(r.Context(), id)
	known := err == nil
	if err != nil && !api.IsCode(err, api.CodeNotFound) {
		return err
	}
	if !known {
		// Compare against something all the same, so that an unknown
		// sandbox takes the time of a wrong token.
		token = strings.Repeat("0", 64)
	}
	header, query, cookie := presentedToken(r, token)
	if !known || !(public || header || query || cookie) {
		return errPreviewDenied
	}
	meta(r.Context()).previewTenant = tenant
	if query && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		s.setTokenCookie(w, r, token)
		return nil
	}
	return s.proxy(w, r, portTarget{tenant: tenant, id: id, port: port, path: cmp.Or(r.URL.EscapedPath(), "/")})
}

// presentedToken reports which of the request's places hold token. Every
// comparison takes constant time, and an empty token matches nothing.
func presentedToken(r *http.Request, token string) (header, query, cookie bool) {
	match := func(v string) bool {
		return token != "" && subtle.ConstantTimeCompare([]byte(v), []byte(token)) == 1
	}
	for _, v := range r.Header.Values(tokenHeader) {
		header = match(v) || header
	}
	for _, v := range r.URL.Query()[tokenParam] {
		query = match(v) || query
	}
	// Every cookie of the names: a page on a sibling host may have set one
	// for the whole domain, and it must not hide the host's own.
	for _, name := range []string{tokenCookie, tokenCookieSecure} {
		for _, c := range r.CookiesNamed(name) {
			cookie = match(c.Value) || cookie
		}
	}
	return header, query, cookie
}

// setTokenCookie answers a GET whose query carried the access token: a
// page that goes on at once to the same URL without it, setting the cookie
// that carries the token from then on, for this host name only.
func (s *Server) setTokenCookie(w http.ResponseWriter, r *http.Request, token string) {
	secure := r.TLS != nil || s.preview.scheme == "https" || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
	name := tokenCookie
	if secure {
		name = tokenCookieSecure
	}
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: token, Path: "/",
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode,
	})
	loc := cmp.Or(r.URL.EscapedPath(), "/")
	if strings.HasPrefix(loc, "//") {
		// "//x" would be another host: "/.//x" is this host's path "//x".
		loc = "/." + loc
	}
	if q := withoutParam(r.URL.RawQuery, tokenParam); q != "" {
		loc += "?" + q
	}
	w.Header().Set("Refresh", "0; url="+loc)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "<!doctype html><meta http-equiv=\"refresh\" content=\"0; url=%s\"><a href=\"%s\">continue</a>\n",
		html.EscapeString(loc), html.EscapeString(loc))
}

// getPreview answers GET /v1/sandboxes/{id}/preview.
func (s *Server) getPreview(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	p, err := s.sb.Preview(r.Context(), caller(r).Tenant, id)
	if err != nil {
		return err
	}
	p.URL = s.preview.urlTemplate(id)
	return writeJSON(w, http.StatusOK, p)
}

// setPreview answers PUT /v1/sandboxes/{id}/preview.
func (s *Server) setPreview(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var req api.SetPreviewRequest
	if err := s.decodeJSON(w, r, &req, false); err != nil {
		return err
	}
	p, err := s.sb.SetPreview(r.Context(), caller(r).Tenant, id, req)
	if err != nil {
		return err
	}
	p.URL = s.preview.urlTemplate(id)
	return writeJSON(w, http.StatusOK, p)
}
