//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"warren/api"
	"warren/client"
)

// TestConsole drives the web console (console/, served at /console) in a
// real headless Chromium against the shared daemon, as a tenant of its
// own: sign in (a wrong key first), create a sandbox from the page, run a
// command in its terminal (when the daemon has the terminal route),
// upload a file and see it listed, take two snapshots, fork the first
// from the lineage tree and check the tree's nodes and edges, delete the
// sandbox; then the fleet page and a 400 px window. Each step's screenshot goes to $WARREN_TEST_ARTIFACTS (or a
// temporary directory).
func TestConsole(t *testing.T) {
	need(t)
	chromium := findChromium(t)
	artifacts := os.Getenv("WARREN_TEST_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	artifacts = filepath.Join(artifacts, "console")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(shared.url + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /console/: %s: bin/warren was built without the console (scripts/deps.sh builds it)", res.Status)
	}

	suffix := make([]byte, 4)
	rand.Read(suffix)
	k, err := shared.client().CreateKey(context.Background(), api.CreateKeyRequest{Tenant: "console-" + hex.EncodeToString(suffix)})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(shared.url, k.Key)
	t.Cleanup(func() { cleanupTenant(c) })

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ctx, cancel = chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium leaves its singleton socket's directory in TMPDIR.
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1200, 900),
	)
	defer cancel()
	ctx, cancel = chromedp.NewContext(ctx)
	defer cancel()
	// The first action starts the browser, for as long as ctx lasts; each
	// step after it has a timeout of its own.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	b := &browser{t: t, ctx: ctx, dir: artifacts}

	// Sign in: a wrong key is told in words, then the tenant's key.
	b.do(chromedp.Navigate(shared.url+"/console/"), chromedp.WaitVisible("#api-key"))
	b.do(chromedp.SendKeys("#api-key", "wk_not_a_key"), chromedp.Click(`button[type="submit"]`))
	if kind, text := b.status("sign-in", ""); kind != "error" || !strings.Contains(text, "refused the key") {
		t.Fatalf("sign-in with a wrong key: %s %q, want an error saying the key was refused", kind, text)
	}
	b.shot("01-wrong-key")
	b.eval(`document.querySelector("#api-key").value = ""`)
	b.do(chromedp.SendKeys("#api-key", k.Key), chromedp.Click(`button[type="submit"]`), chromedp.WaitVisible("#create-form"))
	if key := b.eval(`sessionStorage.getItem("warren.apiKey") + "|" + document.cookie + "|" + localStorage.length`); key != k.Key+"||0" {
		t.Errorf("after sign-in: sessionStorage|cookie|localStorage = %q, want the key in sessionStorage only", key)
	}
	b.shot("02-signed-in")

	// Create a sandbox from the page; it is listed.
	b.do(chromedp.Click("#create-submit"))
	kind, text := b.status("create", "")
	m := regexp.MustCompile(`Created (sb-[a-z0-9]+)`).FindStringSubmatch(text)
	if kind != "ok" || m == nil {
		t.Fatalf("create: %s %q, want Created sb-…", kind, text)
	}
	id := m[1]
	b.poll(fmt.Sprintf(`document.querySelector('tr[data-sandbox=%q][data-state="running"]') !== null`, id))
	b.shot("03-created")

	// Its page.
	b.do(chromedp.Click(fmt.Sprintf(`a[href="#/sandboxes/%s"]`, id)), chromedp.WaitVisible(`#sandbox-details[data-state="running"]`))
	b.poll(`document.querySelector('#network dl') !== null && document.querySelector('#metrics dl') !== null`)
	b.shot("04-sandbox")

	// The terminal, when the daemon has its route; else the page says it
	// is not available.
	req, _ := http.NewRequest("GET", shared.url+"/v1/sandboxes/"+id+"/terminal?cols=80&rows=24", nil)
	req.Header.Set("Authorization", "Bearer "+k.Key)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	noRoute := res.StatusCode == http.StatusNotFound && strings.Contains(string(body), "no route")
	b.do(chromedp.Click("#terminal-open"))
	if noRoute {
		if kind, text := b.status("terminal", "Connecting…"); kind != "error" || !strings.Contains(text, "terminal is not available") {
			t.Errorf("terminal without its route: %s %q, want it said not available", kind, text)
		}
		b.shot("05-terminal-unavailable")
	}
	t.Run("terminal", func(t *testing.T) {
		if noRoute {
			t.Skipf("the daemon has no GET /v1/sandboxes/{id}/terminal route (it answered %d %s)", res.StatusCode, strings.TrimSpace(string(body)))
		}
		b := &browser{t: t, ctx: ctx, dir: artifacts}
		b.do(chromedp.WaitVisible(`#terminal[data-connected="true"]`))
		b.do(chromedp.SendKeys("#terminal", "echo hello-console\r"))
		b.poll(`/^hello-console\s*$/m.test(document.querySelector("#terminal").textContent)`)
		b.shot("05-terminal")
	})

	// Upload a file through the page; the browser lists it.
	local := filepath.Join(t.TempDir(), "console-upload.txt")
	if err := os.WriteFile(local, []byte("uploaded from the console\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do(chromedp.SetUploadFiles("#files-upload", []string{local}), chromedp.Click("#upload-submit"))
	b.poll(`document.querySelector('tr[data-file="console-upload.txt"][data-type="file"]') !== null`)
	rc, err := c.ReadFile(ctx, id, "/root/console-upload.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "uploaded from the console\n" {
		t.Errorf("the uploaded file holds %q", got)
	}
	b.shot("06-uploaded")

	// Two snapshots from the sandbox's page.
	var snaps []string
	prev := ""
	for range 2 {
		b.do(chromedp.Click("#snapshot-button"))
		kind, text := b.status("sandbox", prev)
		m := regexp.MustCompile(`Snapshot (\S+) is durable`).FindStringSubmatch(text)
		if kind != "ok" || m == nil {
			t.Fatalf("snapshot: %s %q, want Snapshot … is durable", kind, text)
		}
		snaps, prev = append(snaps, m[1]), text
	}
	b.shot("07-snapshots-taken")

	// Fork one sandbox from the first, from the tree.
	first, second := snaps[0], snaps[1]
	b.do(chromedp.Navigate(shared.url+"/console/#/snapshots"), chromedp.WaitVisible(fmt.Sprintf(`g[data-node=%q]`, first)))
	b.do(chromedp.Focus(fmt.Sprintf(`g[data-node=%q]`, first)), chromedp.KeyEvent("\r"), chromedp.WaitVisible("#fork-count"))
	b.do(chromedp.SetValue("#fork-count", "1"), chromedp.Click("#fork-n-button"))
	kind, text = b.status("snapshot-action", "")
	m = regexp.MustCompile(`Started from \S+: (sb-[a-z0-9]+)\.`).FindStringSubmatch(text)
	if kind != "ok" || m == nil {
		t.Fatalf("fork: %s %q, want Started from …: sb-….", kind, text)
	}
	child := m[1]
	b.poll(fmt.Sprintf(`document.querySelector('g[data-node=%q]') !== null`, child))
	nodes := strings.Split(b.eval(`[...document.querySelectorAll("#tree g.node")].map(g => g.dataset.kind + ":" + g.dataset.node).sort().join(" ")`), " ")
	edges := strings.Split(b.eval(`[...document.querySelectorAll("#tree path.edge")].map(p => p.dataset.from + ">" + p.dataset.to).sort().join(" ")`), " ")
	wantNodes := []string{"sandbox:" + child, "snapshot:" + first, "snapshot:" + second}
	wantEdges := []string{first + ">" + child, first + ">" + second}
	slices.Sort(wantNodes)
	slices.Sort(wantEdges)
	if !slices.Equal(nodes, wantNodes) || !slices.Equal(edges, wantEdges) {
		t.Errorf("tree: nodes %q edges %q, want nodes %q edges %q", nodes, edges, wantNodes, wantEdges)
	}
	b.shot("08-tree")

	// Delete the sandbox from the list: its row goes.
	b.do(chromedp.Navigate(shared.url+"/console/#/sandboxes"), chromedp.WaitVisible(fmt.Sprintf(`tr[data-sandbox=%q] button`, id)))
	b.do(chromedp.Click(fmt.Sprintf(`tr[data-sandbox=%q] button`, id)))
	b.poll(fmt.Sprintf(`document.querySelector('tr[data-sandbox=%q]') === null`, id))
	if kind, text := b.status("sandboxes", ""); kind != "ok" || !strings.Contains(text, "Deleted "+id) {
		t.Errorf("delete: %s %q, want Deleted %s", kind, text, id)
	}
	b.shot("09-deleted")

	// The fleet page tells a tenant's key it is not an admin's.
	b.do(chromedp.Navigate(shared.url+"/console/#/fleet"), chromedp.WaitVisible("#fleet-message"))
	if text := b.eval(`document.querySelector("#fleet-message").textContent`); !strings.Contains(text, "not an admin's") {
		t.Errorf("fleet page for a tenant's key: %q, want it said the key is not an admin's", text)
	}
	b.shot("10-fleet")

	// A 400 px window: the page reflows, nothing wider than the window.
	b.do(chromedp.EmulateViewport(400, 800), chromedp.Navigate(shared.url+"/console/#/sandboxes"), chromedp.WaitVisible("#create-form"))
	if w := b.eval(`document.documentElement.scrollWidth + " " + document.documentElement.clientWidth`); w != "385 385" && w != "400 400" {
		t.Errorf("at 400 px the page's width and the window's are %s", w)
	}
	b.shot("11-narrow")
}

// browser runs steps in one Chromium tab, failing t on an error.
type browser struct {
	t   testing.TB
	ctx context.Context
	dir string
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.shot("failed")
		b.t.Fatal(err)
	}
}

// eval returns a JavaScript expression's value as a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// poll waits until a JavaScript predicate holds (two minutes at most).
func (b *browser) poll(predicate string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(2*time.Minute))); err != nil {
		b.shot("failed")
		b.t.Fatalf("waiting for %s: %v", predicate, err)
	}
}

// status waits until the page's status line name (dom.ts's Status) says
// how an action ended, in other words than not, and returns its kind
// ("ok" or "error") and text.
func (b *browser) status(name, not string) (kind, text string) {
	b.t.Helper()
	expr := fmt.Sprintf(`(() => { const e = document.querySelector('[data-status=%q]');
		return e && (e.dataset.kind === "ok" || e.dataset.kind === "error") && e.textContent !== %q ? e.dataset.kind + "|" + e.textContent : ""; })()`, name, not)
	v, err := chromedp.Run(b.ctx, chromedp.Poll[string](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(3*time.Minute)))
	if err != nil {
		b.shot("failed")
		b.t.Fatalf("waiting for the %s status: %v", name, err)
	}
	kind, text, _ = strings.Cut(v, "|")
	return kind, text
}

// shot saves a screenshot of the page as name.png and logs its path.
func (b *browser) shot(name string) {
	b.t.Helper()
	// Quality 100 makes a PNG (less, a JPEG).
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: %s", p)
}

// findChromium returns the Chromium to drive, or skips saying why.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (scripts/deps.sh installs Debian's chromium): the console's browser test needs one")
	return ""
}

// cleanupTenant deletes what the test's tenant left: sandboxes, then
// snapshots.
func cleanupTenant(c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if sbs, err := c.ListSandboxes(ctx); err == nil {
		for _, s := range sbs {
			c.DeleteSandbox(ctx, s.ID)
		}
	}
	if snaps, err := c.ListSnapshots(ctx, ""); err == nil {
		for _, s := range snaps {
			c.DeleteSnapshot(ctx, s.ID)
		}
	}
}
