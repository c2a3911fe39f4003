package server

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"warren/api"
	"warren/internal/ident"
)

func TestParsePreviewDomain(t *testing.T) {
	for _, tc := range []struct {
		in                   string
		domain, scheme, port string // want; domain "" for an error
	}{
		{"preview.example.com", "preview.example.com", "https", ""},
		{"Preview.Example.COM.", "preview.example.com", "https", ""},
		{"localhost", "localhost", "https", ""},
		{"http://localhost:7777", "localhost", "http", "7777"},
		{"https://p.example.com/", "p.example.com", "https", ""},
		{"https://p.example.com:8443", "p.example.com", "https", "8443"},
		{"", "", "", ""},
		{"1.2.3.4", "", "", ""},
		{"http://1.2.3.4:80", "", "", ""},
		{"http://[::1]:80", "", "", ""},
		{"ftp://p.example.com", "", "", ""},
		{"p.example.com:80", "", "", ""},
		{"http://p.example.com/path", "", "", ""},
		{"http://p.example.com/?q=1", "", "", ""},
		{"http://user@p.example.com", "", "", ""},
		{"http://p.example.com:0", "", "", ""},
		{"http://p.example.com:99999", "", "", ""},
		{"-bad.example.com", "", "", ""},
		{"a..b", "", "", ""},
		{"exa mple.com", "", "", ""},
		{"under_score.com", "", "", ""},
		{"*.example.com", "", "", ""},
		{strings.Repeat("a.", 120) + "com", "", "", ""},
	} {
		got, err := parsePreviewDomain(tc.in)
		if tc.domain == "" {
			if err == nil {
				t.Errorf("parsePreviewDomain(%q) = %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != (previewSite{tc.domain, tc.scheme, tc.port}) {
			t.Errorf("parsePreviewDomain(%q) = %+v, %v; want %s %s %q", tc.in, got, err, tc.domain, tc.scheme, tc.port)
		}
	}
	if err := CheckPreviewDomain("http://x.example.com:1"); err != nil {
		t.Errorf("CheckPreviewDomain: %v", err)
	}
}

const testID = "sb-abcdefghijklmnopqrst"

func TestParsePreviewHost(t *testing.T) {
	site, err := parsePreviewDomain("preview.example.com")
	if err != nil {
		t.Fatal(err)
	}
	const d = ".preview.example.com"
	for _, tc := range []struct {
		host string
		kind hostKind
		port int
	}{
		{"8080-" + testID + d, isPreview, 8080},
		{"1-" + testID + d, isPreview, 1},
		{"65535-" + testID + d, isPreview, 65535},
		{"8080-" + strings.ToUpper(testID+d), isPreview, 8080},
		{"8080-" + testID + d + ":443", isPreview, 8080},
		{"8080-" + testID + d + ":", isPreview, 8080},
		{"8080-" + testID + d + ".", isPreview, 8080},
		{"8080-" + testID + d + ".:7777", isPreview, 8080},
		// Under the domain, but no PORT-ID: never the API.
		{"0-" + testID + d, badPreview, 0},
		{"65536-" + testID + d, badPreview, 0},
		{"99999999999999999999-" + testID + d, badPreview, 0},
		{"08080-" + testID + d, badPreview, 0},
		{"+8080-" + testID + d, badPreview, 0},
		{"-" + testID + d, badPreview, 0},
		{"8080" + d, badPreview, 0},
		{"8080-" + d[1:], notPreview, 0},
		{"8080--" + testID + d, badPreview, 0},
		{"8080-sb-abc" + d, badPreview, 0},
		{"8080-sn-abcdefghijklmnopqrst" + d, badPreview, 0},
		{"8080-sb-abcdefghijklmnopqrs1" + d, badPreview, 0},
		{"8080-" + testID + "x" + d, badPreview, 0},
		{"8080-sb-\u212abcdefghijklmnopqrst" + d, badPreview, 0}, // a Kelvin sign is no k
		{"www.8080-" + testID + d, badPreview, 0},
		{"8080-" + testID + ".x" + d, badPreview, 0},
		{"8080-" + testID + d + ":https", badPreview, 0},
		{"8080-" + testID + d + ":80:80", badPreview, 0},
		{"foo" + d, badPreview, 0},
		{"." + d[1:], badPreview, 0},
		// Not under the domain: the API's.
		{"preview.example.com", notPreview, 0},
		{"PREVIEW.example.com:7777", notPreview, 0},
		{"8080-" + testID + ".preview.example.org", notPreview, 0},
		{"8080-" + testID + ".evilpreview.example.com", notPreview, 0},
		{"8080-" + testID + d + ".evil.com", notPreview, 0},
		{"8080-" + testID + "preview.example.com", notPreview, 0},
		{"127.0.0.1:7777", notPreview, 0},
		{"[::1]:7777", notPreview, 0},
		{"", notPreview, 0},
	} {
		port, id, kind := site.parseHost(tc.host)
		if kind != tc.kind || port != tc.port || (kind == isPreview) != (id == testID) {
			t.Errorf("parseHost(%q) = %d %q %v, want %d %v", tc.host, port, id, kind, tc.port, tc.kind)
		}
	}
	// No preview domain: nothing is a preview host.
	if _, _, kind := (previewSite{}).parseHost("8080-" + testID + d); kind != notPreview {
		t.Errorf("without a preview domain: %v", kind)
	}
}

// FuzzPreviewHost checks parseHost on any Host: it never panics; what it
// takes is exactly the canonical PORT-ID.<domain> of what it returns (in
// any case, with an optional trailing dot and port); what it calls not a
// preview host is not under the domain.
func FuzzPreviewHost(f *testing.F) {
	for _, s := range []string{
		"8080-" + testID + ".preview.example.com",
		"8080-" + strings.ToUpper(testID) + ".PREVIEW.example.com.:443",
		"0-" + testID + ".preview.example.com",
		"65536-" + testID + ".preview.example.com",
		"08080-" + testID + ".preview.example.com",
		"x.8080-" + testID + ".preview.example.com",
		"preview.example.com",
		"8080-" + testID + ".preview.example.com.evil",
		"[::1]:80", ":", "", ".", "..preview.example.com",
		"8080-" + testID + ".preview.example.com:99999999999999999999",
		"\x00.preview.example.com", "8080-sb-\u0130bcdefghijklmnopqrst.preview.example.com",
		"8080-sb-\u212abcdefghijklmnopqrst.preview.example.com",
	} {
		f.Add(s)
	}
	site, err := parsePreviewDomain("preview.example.com")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host string) {
		port, id, kind := site.parseHost(host)
		name, _, _ := strings.Cut(host, ":")
		name = strings.TrimSuffix(asciiLower(name), ".")
		switch kind {
		case isPreview:
			if port < 1 || port > 65535 || !ident.Valid(id, "sb-") {
				t.Fatalf("%q: port %d, id %q", host, port, id)
			}
			if want := strconv.Itoa(port) + "-" + id + ".preview.example.com"; name != want {
				t.Fatalf("%q taken as %s", host, want)
			}
		case notPreview:
			if strings.HasSuffix(name, ".preview.example.com") && host[0] != '[' {
				t.Fatalf("%q is under the domain, yet not a preview host", host)
			}
		case badPreview:
			if !strings.HasSuffix(name, ".preview.example.com") {
				t.Fatalf("%q is not under the domain, yet refused as a bad preview host", host)
			}
		}
	})
}

// previewEnv is a server with a preview domain, and tenant a's sandbox
// whose port 8080 is an echo backend.
func previewEnv(t *testing.T, domain string) (*testEnv, string, string) {
	t.Helper()
	e, id := newPortEnv(t, Options{PreviewDomain: domain}, echoBackend())
	var p api.Preview
	e.call("GET", "/v1/sandboxes/"+id+"/preview", e.keyA, nil, http.StatusOK, &p)
	return e, id, p.Token
}

// previewRequest is a request to the test server with a preview host name.
func (e *testEnv) previewRequest(method, host, path string, body io.Reader) *http.Request {
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Host = host
	return req
}

// roundTrip sends req as it is (no key added, no redirect followed).
func (e *testEnv) roundTrip(req *http.Request) *http.Response {
	e.t.Helper()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		e.t.Fatalf("%s %s (Host %s): %v", req.Method, req.URL, req.Host, err)
	}
	return resp
}

func TestPreviewRoutes(t *testing.T) {
	for _, tc := range []struct{ domain, url string }{
		{"", ""},
		{"preview.test", "https://{port}-ID.preview.test/"},
		{"http://Preview.Localhost:7777", "http://{port}-ID.preview.localhost:7777/"},
	} {
		e, id := newPortEnv(t, Options{PreviewDomain: tc.domain}, nil)
		path := "/v1/sandboxes/" + id + "/preview"
		var p api.Preview
		e.call("GET", path, e.keyA, nil, http.StatusOK, &p)
		raw, err := hex.DecodeString(p.Token)
		if err != nil || len(raw) != 32 || p.Public {
			t.Errorf("new sandbox's preview %+v: want private with a token of 32 bytes in hex", p)
		}
		wantURL := strings.ReplaceAll(tc.url, "ID", id)
		if (p.URL == nil) != (tc.url == "") || (p.URL != nil && *p.URL != wantURL) {
			t.Errorf("domain %q: url %v, want %q", tc.domain, p.URL, wantURL)
		}
		if p.URL != nil && p.PortURL(3000) != strings.ReplaceAll(wantURL, "{port}", "3000") {
			t.Errorf("PortURL(3000) = %q", p.PortURL(3000))
		}
		token := p.Token

		e.call("PUT", path, e.keyA, `{"public":true}`, http.StatusOK, &p)
		if !p.Public || p.Token != token {
			t.Errorf("after public: %+v", p)
		}
		e.call("PUT", path, e.keyA, `{}`, http.StatusOK, &p)
		if !p.Public || p.Token != token {
			t.Errorf("after {}: %+v, want it unchanged", p)
		}
		e.call("PUT", path, e.keyA, `{"rotate_token":true}`, http.StatusOK, &p)
		if !p.Public || p.Token == token || len(p.Token) != 64 {
			t.Errorf("after rotate: %+v", p)
		}
		e.call("PUT", path, e.keyA, `{"public":false}`, http.StatusOK, &p)
		if p.Public {
			t.Errorf("after private: %+v", p)
		}
		for _, body := range []string{``, `{"public":"yes"}`, `{"rotate":true}`, `[]`} {
			apiError(t, e.do("PUT", path, e.keyA, body), http.StatusBadRequest, api.CodeBadRequest)
		}
		apiError(t, e.do("GET", path, e.keyB, nil), http.StatusNotFound, api.CodeNotFound)
		apiError(t, e.do("PUT", path, e.keyB, `{"public":true}`), http.StatusNotFound, api.CodeNotFound)
	}
}

func TestPreviewHostAccess(t *testing.T) {
	e, id, token := previewEnv(t, "preview.test")
	host := "8080-" + id + ".preview.test"
	unknown := "8080-" + ident.New("sb-") + ".preview.test"

	// Denied: no token, a wrong one, the API key; and an unknown sandbox
	// looks the same.
	var denied []string
	for _, tc := range []struct {
		name, host string
		set        func(*http.Request)
	}{
		{"no token", host, func(*http.Request) {}},
		{"wrong header", host, func(r *http.Request) { r.Header.Set(tokenHeader, strings.Repeat("0", 64)) }},
		{"empty header", host, func(r *http.Request) { r.Header.Set(tokenHeader, "") }},
		{"wrong cookie", host, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: tokenCookie, Value: "x"}) }},
		{"wrong query", host, func(r *http.Request) { r.URL.RawQuery = tokenParam + "=nope" }},
		{"API key", host, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+e.keyA) }},
		{"API key header", host, func(r *http.Request) { r.Header.Set("X-API-Key", e.keyA) }},
		{"token prefix", host, func(r *http.Request) { r.Header.Set(tokenHeader, token[:63]) }},
		{"unknown sandbox", unknown, func(*http.Request) {}},
		{"unknown sandbox with a token", unknown, func(r *http.Request) { r.Header.Set(tokenHeader, token) }},
		{"unknown sandbox with the dummy", unknown, func(r *http.Request) { r.Header.Set(tokenHeader, strings.Repeat("0", 64)) }},
	} {
		req := e.previewRequest("GET", tc.host, "/", nil)
		tc.set(req)
		resp := e.roundTrip(req)
		got := apiError(t, resp, http.StatusUnauthorized, api.CodeUnauthorized)
		denied = append(denied, got.Message)
	}
	for _, m := range denied {
		if m != denied[0] {
			t.Errorf("401 messages differ: %q and %q", m, denied[0])
		}
	}

	// Granted by the header, the cookie, a right cookie among wrong ones.
	for name, set := range map[string]func(*http.Request){
		"header": func(r *http.Request) { r.Header.Set(tokenHeader, token) },
		"cookie": func(r *http.Request) { r.Header.Set("Cookie", "app=1; "+tokenCookie+"="+token) },
		"two cookies": func(r *http.Request) {
			r.Header.Set("Cookie", tokenCookie+"=tossed; app=1; "+tokenCookie+"="+token)
		},
		"header and wrong query": func(r *http.Request) {
			r.Header.Set(tokenHeader, token)
			r.URL.RawQuery = "a=1&" + tokenParam + "=wrong"
		},
	} {
		req := e.previewRequest("POST", strings.ToUpper(host)+":80", "/v1/info", strings.NewReader("body"))
		set(req)
		got := readSeen(t, e.roundTrip(req))
		// The path is the app's, even one that looks like the API's.
		if got.Path != "/v1/info" || got.Body != "body" || got.Host != strings.ToUpper(host)+":80" {
			t.Errorf("%s: the sandbox saw %s %s (Host %s) %q", name, got.Method, got.Path, got.Host, got.Body)
		}
		if got.Header.Get(tokenHeader) != "" || strings.Contains(strings.Join(got.Header.Values("Cookie"), ";"), tokenCookie) ||
			strings.Contains(got.Query, tokenParam) {
			t.Errorf("%s: the sandbox saw the token: header %q cookies %q query %q",
				name, got.Header.Get(tokenHeader), got.Header.Values("Cookie"), got.Query)
		}
		if c := got.Header.Values("Cookie"); len(c) != 0 && c[0] != "app=1" {
			t.Errorf("%s: cookies %q, want the app's kept", name, c)
		}
		if got.Header.Get("X-Forwarded-Prefix") != "" {
			t.Errorf("%s: X-Forwarded-Prefix %q on a preview host", name, got.Header.Get("X-Forwarded-Prefix"))
		}
	}
	if !strings.Contains(e.logs.String(), "tenant=a") {
		t.Error("the access log does not name the sandbox's tenant")
	}

	// Rotated: the old token stops working.
	var p api.Preview
	e.call("PUT", "/v1/sandboxes/"+id+"/preview", e.keyA, `{"rotate_token":true}`, http.StatusOK, &p)
	req := e.previewRequest("GET", host, "/", nil)
	req.Header.Set(tokenHeader, token)
	apiError(t, e.roundTrip(req), http.StatusUnauthorized, api.CodeUnauthorized)
	req = e.previewRequest("GET", host, "/", nil)
	req.Header.Set(tokenHeader, p.Token)
	if got := readSeen(t, e.roundTrip(req)); got.Method != "GET" {
		t.Errorf("new token: %+v", got)
	}

	// Public: anyone; the app's own Authorization goes through, a warren
	// key does not.
	e.call("PUT", "/v1/sandboxes/"+id+"/preview", e.keyA, `{"public":true}`, http.StatusOK, nil)
	req = e.previewRequest("GET", host, "/x", nil)
	req.Header.Set("Authorization", "Basic YXBwOnB3")
	req.Header.Set("X-API-Key", "app-key")
	if got := readSeen(t, e.roundTrip(req)); got.Header.Get("Authorization") != "Basic YXBwOnB3" || got.Header.Get("X-API-Key") != "app-key" {
		t.Errorf("public: the app's credentials %q %q did not get through", got.Header.Get("Authorization"), got.Header.Get("X-API-Key"))
	}
	req = e.previewRequest("GET", host, "/x", nil)
	req.Header.Set("Authorization", "Bearer "+e.keyA)
	req.Header.Set("X-API-Key", e.keyA)
	if got := readSeen(t, e.roundTrip(req)); got.Header.Get("Authorization") != "" || got.Header.Get("X-API-Key") != "" {
		t.Errorf("public: the sandbox saw a warren key: %q %q", got.Header.Get("Authorization"), got.Header.Get("X-API-Key"))
	}
	// A stopped sandbox, once access is granted, says so.
	e.fake.setState(id, api.StateStopped)
	apiError(t, e.roundTrip(e.previewRequest("GET", host, "/", nil)), http.StatusConflict, api.CodeConflict)
	e.call("PUT", "/v1/sandboxes/"+id+"/preview", e.keyA, `{"public":false}`, http.StatusOK, nil)
	apiError(t, e.roundTrip(e.previewRequest("GET", host, "/", nil)), http.StatusUnauthorized, api.CodeUnauthorized)
}

// A link with the token in its query opens in a browser: a page that goes
// on to the same URL without it (Refresh, a same-site navigation that
// carries the Strict cookie; a 302 in a cross-site chain would not), and a
// cookie for that host from then on: __Host- prefixed under https.
func TestPreviewTokenInQuery(t *testing.T) {
	for _, tc := range []struct {
		domain string
		secure bool
	}{
		{"preview.test", true},              // https preview URLs
		{"http://preview.test:1234", false}, // plain http, no TLS
	} {
		e, id, token := previewEnv(t, tc.domain)
		host := "8080-" + id + ".preview.test"
		req := e.previewRequest("GET", host, "/app/page?b=2&"+tokenParam+"="+token+"&a=%20", nil)
		resp := e.roundTrip(req)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Refresh") != "0; url=/app/page?b=2&a=%20" ||
			!strings.Contains(string(body), `content="0; url=/app/page?b=2&amp;a=%20"`) {
			t.Fatalf("status %d, Refresh %q, body %q; want a page going on to the URL without the token", resp.StatusCode, resp.Header.Get("Refresh"), body)
		}
		wantName := tokenCookie
		if tc.secure {
			wantName = tokenCookieSecure
		}
		var cookie *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == wantName {
				cookie = c
			}
		}
		if cookie == nil || cookie.Value != token || !cookie.HttpOnly || cookie.Secure != tc.secure ||
			cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.Domain != "" {
			t.Errorf("%s: cookie %+v; want %s: the token, HttpOnly, Secure %v, Strict, path /, this host only", tc.domain, cookie, wantName, tc.secure)
		}
		if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("Cache-Control %q, Referrer-Policy %q", resp.Header.Get("Cache-Control"), resp.Header.Get("Referrer-Policy"))
		}
		// The browser follows with the cookie.
		req = e.previewRequest("GET", host, "/app/page?b=2&a=%20", nil)
		req.AddCookie(cookie)
		if got := readSeen(t, e.roundTrip(req)); got.Path != "/app/page" || got.Query != "b=2&a=%20" {
			t.Errorf("after the redirect: %+v", got)
		}

		// "//evil.example/" must stay a path of this host.
		req = e.previewRequest("GET", host, "//evil.example/x?"+tokenParam+"="+token, nil)
		resp = e.roundTrip(req)
		resp.Body.Close()
		if loc := resp.Header.Get("Refresh"); loc != "0; url=/.//evil.example/x" {
			t.Errorf("going on from //evil.example/x: %d to %q", resp.StatusCode, loc)
		}
		// Another method is not redirected: proxied without the parameter.
		req = e.previewRequest("POST", host, "/form?"+tokenParam+"="+token+"&k=v", strings.NewReader("x"))
		if got := readSeen(t, e.roundTrip(req)); got.Method != "POST" || got.Query != "k=v" {
			t.Errorf("POST with the token in its query: the sandbox saw %s ?%s", got.Method, got.Query)
		}
		// A wrong token in the query is no access, and no redirect.
		req = e.previewRequest("GET", host, "/?"+tokenParam+"=wrong", nil)
		apiError(t, e.roundTrip(req), http.StatusUnauthorized, api.CodeUnauthorized)
	}
}

// The API is never served on a name under the preview domain, and still
// is on the domain itself and on other names.
func TestPreviewDomainKeepsTheAPIApart(t *testing.T) {
	e, id, _ := previewEnv(t, "preview.test")
	for _, tc := range []struct {
		host   string
		status int
	}{
		{"preview.test", http.StatusOK},
		{"api.example.com", http.StatusOK},
		{"foo.preview.test", http.StatusNotFound},
		{"0-" + id + ".preview.test", http.StatusNotFound},
		{"08080-" + id + ".preview.test", http.StatusNotFound},
		{"x.8080-" + id + ".preview.test", http.StatusNotFound},
		{"8080-" + id + ".preview.test", http.StatusUnauthorized},
	} {
		req := e.previewRequest("GET", tc.host, "/v1/info", nil)
		req.Header.Set("Authorization", "Bearer "+e.keyA)
		resp := e.roundTrip(req)
		if tc.status == http.StatusOK {
			var info api.NodeInfo
			err := jsonDecode(resp, &info)
			if resp.StatusCode != 200 || err != nil || info.Version != "test" {
				t.Errorf("Host %s: status %d, %v; want the API", tc.host, resp.StatusCode, err)
			}
			continue
		}
		code := api.CodeNotFound
		if tc.status == http.StatusUnauthorized {
			code = api.CodeUnauthorized
		}
		apiError(t, resp, tc.status, code)
	}
}

func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// TestSandboxAnswerSanitized is the regression test of issue 13, item 9: a
// sandbox planted cookies on its siblings' previews (Domain= the preview
// parent, warren's own token cookie), wiped the site's storage
// (Clear-Site-Data), bound every sibling to HTTPS (includeSubDomains), and
// added its own X-Request-Id beside warren's.
func TestSandboxAnswerSanitized(t *testing.T) {
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Set-Cookie", "sid=abc; Domain=preview.test; Path=/; HttpOnly")
		h.Add("Set-Cookie", tokenCookie+"=forged; Domain=preview.test; Path=/")
		h.Add("Set-Cookie", tokenCookieSecure+"=forged; Path=/; Secure")
		h.Add("Set-Cookie", "theme=dark; Path=/app")
		h.Add("Set-Cookie", "not a cookie")
		h.Set("Clear-Site-Data", `"cookies", "storage"`)
		h.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains; preload")
		h.Set("X-Request-Id", "sandbox-made")
		io.WriteString(w, "ok")
	})
	e, id := newPortEnv(t, Options{PreviewDomain: "preview.test"}, backend)
	e.call("PUT", "/v1/sandboxes/"+id+"/preview", e.keyA, `{"public":true}`, http.StatusOK, nil)
	check := func(resp *http.Response, route bool) {
		t.Helper()
		resp.Body.Close()
		var got []string
		for _, c := range resp.Cookies() {
			got = append(got, c.Name+" domain="+c.Domain+" path="+c.Path)
		}
		want := []string{"sid domain= path=/", "theme domain= path=/app"}
		if route {
			prefix := "/v1/sandboxes/" + id + "/ports/8080"
			want = []string{"sid domain= path=" + prefix + "/", "theme domain= path=" + prefix + "/app"}
		}
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("cookies %q, want %q", got, want)
		}
		if v := resp.Header.Values("Clear-Site-Data"); len(v) != 0 {
			t.Errorf("Clear-Site-Data passed: %q", v)
		}
		if v := resp.Header.Get("Strict-Transport-Security"); v != "max-age=63072000" {
			t.Errorf("HSTS %q, want max-age only", v)
		}
		if v := resp.Header.Values("X-Request-Id"); len(v) != 1 || v[0] == "sandbox-made" {
			t.Errorf("X-Request-Id %q, want warren's alone", v)
		}
	}
	check(e.roundTrip(e.previewRequest("GET", "8080-"+id+".preview.test", "/", nil)), false)
	check(e.do("GET", "/v1/sandboxes/"+id+"/ports/8080/", e.keyA, nil), true)
}
