//go:build linux

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"warren/api"
	"warren/internal/archive/archivetest"
)

// BenchmarkE2BHostileUploads runs the attacks of issue 35 on E2B's
// template builds against a fresh node each, as one tenant, and reports
// the daemon's resident memory before and its growth at the peak (sampled
// every 10 ms; the goal: within 64 MiB):
//   - sparse (row 2): builds whose COPY tar (10 KiB, plain) holds a PAX
//     sparse file of 1 TiB, and builds whose two gzipped COPY tars (40 KiB
//     each) unpack to 80 MiB, triggered; each trigger must be a 400;
//   - race (row 5): six concurrent 24 MiB uploads to one build, then five
//     concurrent 56 MiB uploads to five builds; it reports the MiB
//     accepted (at most 64 for the build, 128 for the tenant), and another
//     tenant's upload must still be accepted;
//   - tokens (row 7): 20,000 requests for upload links, 8 at a time, over
//     the tenant's 8 builds (the same files, then new ones).
//
// Run: WARREN_BIN=... go test ./e2e -run '^$' -bench BenchmarkE2BHostileUploads -benchtime 1x
func BenchmarkE2BHostileUploads(b *testing.B) {
	need(b)
	b.Run("sparse", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			node, c := hostileNode(b)
			b.StartTimer()
			sparse := archivetest.SparseTar(1 << 40)
			bomb1, bomb2 := gzipTar(b, "zeros1", 40<<20), gzipTar(b, "zeros2", 40<<20)
			before, peak := peakRSS(b, node, func() {
				for range 4 {
					c.refused("sparse", map[string][]byte{"aa": sparse})
					c.refused("bomb", map[string][]byte{"aa": bomb1, "bb": bomb2})
				}
			})
			reportGrowth(b, before, peak)
		}
	})
	b.Run("race", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			node, c := hostileNode(b)
			b.StartTimer()
			var got int64
			before, peak := peakRSS(b, node, func() {
				c.requestBuild("race")
				var urls []string
				for i := range 6 {
					urls = append(urls, c.link("race", fmt.Sprintf("%02x", i)))
				}
				got = c.uploadAll(urls, 24<<20)
			})
			b.ReportMetric(float64(got)/(1<<20), "MiB-accepted/build")
			reportGrowth(b, before, peak)
			var share []string
			for range 5 {
				c.requestBuild("share")
				share = append(share, c.link("share", "aa"))
			}
			before, peak = peakRSS(b, node, func() { got = c.uploadAll(share, 56<<20) })
			b.ReportMetric(float64(got)/(1<<20), "MiB-accepted/tenant")
			b.ReportMetric(float64(peak-before)/(1<<20), "MiB-growth-share")
			other := hostileClient(b, node, "bystander")
			other.requestBuild("mine")
			if n := other.uploadAll([]string{other.link("mine", "cc")}, 8<<20); n != 8<<20 {
				b.Errorf("another tenant's 8 MiB upload after the attack: %d bytes accepted", n)
			}
		}
	})
	b.Run("tokens", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			node, c := hostileNode(b)
			b.StartTimer()
			for range 8 {
				c.requestBuild("tokens")
			}
			var n atomic.Int64
			before, peak := peakRSS(b, node, func() {
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Go(func() {
						for i := range 20000 / 8 {
							hash := "aa"
							if i%2 == 1 {
								hash = fmt.Sprintf("%x%04x", w+1, i)
							}
							code, _ := c.do("GET", c.url+"/templates/tokens/files/"+hash, nil, 0)
							if code == http.StatusOK || code == http.StatusTooManyRequests {
								n.Add(1)
							}
						}
					})
				}
				wg.Wait()
			})
			if n.Load() != 20000 {
				b.Errorf("%d of 20,000 link requests answered 200 or 429", n.Load())
			}
			reportGrowth(b, before, peak)
		}
	})
}

// hostileNode starts a fresh node for an attack, and a client of E2B's
// API there for a tenant of its own.
func hostileNode(b *testing.B) (*daemon, *e2bClient) {
	node := startNode(b, nil)
	return node, hostileClient(b, node, "hostile")
}

func hostileClient(b *testing.B, node *daemon, tenant string) *e2bClient {
	k, err := node.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: tenant})
	if err != nil {
		b.Fatal(err)
	}
	return &e2bClient{b: b, url: node.url + "/e2b", key: k.Key,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 5 * time.Minute}}
}

// peakRSS runs attack and returns the daemon's resident memory before it
// and the most it had while it ran, sampled every 10 ms.
func peakRSS(b *testing.B, d *daemon, attack func()) (before, peak int64) {
	before = d.rss(b)
	done := make(chan struct{})
	go func() { defer close(done); attack() }()
	peak = before
	for {
		peak = max(peak, d.rss(b))
		select {
		case <-done:
			return before, max(peak, d.rss(b))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func reportGrowth(b *testing.B, before, peak int64) {
	b.ReportMetric(float64(before)/(1<<20), "MiB-before")
	b.ReportMetric(float64(peak-before)/(1<<20), "MiB-growth")
}

// gzipTar is a gzipped tar of one file of size zero bytes.
func gzipTar(b *testing.B, name string, size int64) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(tw, io.LimitReader(zeroReader{}, size)); err != nil {
		b.Fatal(err)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// e2bClient calls E2B's template build routes as the SDKs do. Its
// methods may run concurrently; they report failures with b.Errorf.
type e2bClient struct {
	b        *testing.B
	url, key string
	hc       *http.Client
}

// do sends a request with a body of n bytes (nil: none) and returns the
// status and the answer.
func (c *e2bClient) do(method, url string, body io.Reader, n int64) (int, []byte) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		c.b.Error(err)
		return 0, nil
	}
	if body != nil {
		req.ContentLength = n
	}
	req.Header.Set("X-API-Key", c.key)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.b.Errorf("%s %s: %v", method, url, err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, out
}

func (c *e2bClient) requestBuild(name string) string {
	code, out := c.do("POST", c.url+"/v3/templates", strings.NewReader(`{"name":"`+name+`"}`), -1)
	var r struct{ BuildID string }
	if code != http.StatusAccepted || json.Unmarshal(out, &r) != nil {
		c.b.Errorf("request a build of %s: %d %s", name, code, out)
	}
	return r.BuildID
}

func (c *e2bClient) link(name, hash string) string {
	code, out := c.do("GET", c.url+"/templates/"+name+"/files/"+hash, nil, 0)
	var r struct{ URL string }
	if code != http.StatusOK || json.Unmarshal(out, &r) != nil || r.URL == "" {
		c.b.Errorf("link of %s for %s: %d %s", hash, name, code, out)
	}
	return r.URL
}

// build requests a build of name, uploads files (by hash) and triggers it
// with a COPY step of each; it returns the trigger's status and answer.
func (c *e2bClient) build(name string, files map[string][]byte) (int, []byte) {
	id := c.requestBuild(name)
	var steps []map[string]any
	for hash, data := range files {
		if code, out := c.do("PUT", c.link(name, hash), bytes.NewReader(data), int64(len(data))); code != http.StatusOK {
			c.b.Errorf("upload: %d %s", code, out)
		}
		steps = append(steps, map[string]any{"type": "COPY", "args": []string{".", "/opt/" + hash}, "filesHash": hash})
	}
	body, _ := json.Marshal(map[string]any{"fromTemplate": "base", "steps": steps})
	return c.do("POST", c.url+"/v2/templates/"+name+"/builds/"+id, bytes.NewReader(body), int64(len(body)))
}

// refused builds name of files, a build whose trigger must be a 400.
func (c *e2bClient) refused(name string, files map[string][]byte) {
	if code, out := c.build(name, files); code != http.StatusBadRequest {
		c.b.Errorf("trigger of %s: %d %s, want 400", name, code, out)
	}
}

// uploadAll uploads size bytes of zeros to every URL at once and returns
// the bytes accepted.
func (c *e2bClient) uploadAll(urls []string, size int64) int64 {
	var got atomic.Int64
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Go(func() {
			req, err := http.NewRequest("PUT", u, io.LimitReader(zeroReader{}, size))
			if err != nil {
				c.b.Error(err)
				return
			}
			req.ContentLength = size
			resp, err := c.hc.Do(req)
			if err != nil {
				return // refused before its body was read: the server closed the connection
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				got.Add(size)
			}
		})
	}
	wg.Wait()
	return got.Load()
}
