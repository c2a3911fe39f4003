//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

// listBody is the answer to GET path with key.
func listBody(t testing.TB, key, path string) []byte {
	t.Helper()
	req, _ := http.NewRequest("GET", shared.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d, %v: %s", path, resp.StatusCode, err, b)
	}
	return b
}

// TestListStaysBounded pins issue 14, item 10: five create/delete cycles
// of sandboxes with a big env made a 4.5 MB sandbox list (each stopped
// record kept its env for an hour), and the snapshot list embedded each
// snapshot's lineage (22 KB at 30 snapshots, growing with the square).
func TestListStaysBounded(t *testing.T) {
	need(t)
	ctx := context.Background()
	// A tenant of its own: the suite's daemon may keep the records of an
	// earlier run for an hour.
	k, err := shared.client().CreateKey(ctx, api.CreateKeyRequest{Tenant: fmt.Sprintf("lists-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(shared.url, k.Key)
	env := map[string]string{} // 28 variables of the largest size: 900 KB
	for i := range 28 {
		env[fmt.Sprintf("BIG%d", i)] = strings.Repeat("e", 32_000)
	}
	var ended []string
	for range 5 {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Env: env}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		ended = append(ended, sb.ID)
	}
	if n := len(listBody(t, k.Key, "/v1/sandboxes")); n > 20_000 {
		t.Errorf("list after 5 create/delete cycles with 900 KB envs is %d bytes, want a few KB", n)
	}
	stopped, err := c.ListSandboxes(ctx, api.StateStopped)
	if err != nil || len(stopped) != len(ended) {
		t.Fatalf("stopped sandboxes: %d (%v), want %d", len(stopped), err, len(ended))
	}
	sb, err := c.GetSandbox(ctx, ended[0])
	if err != nil || sb.State != api.StateStopped || sb.Env != nil {
		t.Errorf("GET of a stopped sandbox: state %q, env of %d entries (%v); want stopped, no env", sb.State, len(sb.Env), err)
	}
	page, err := c.SandboxesPage(ctx, false, client.ListOptions{Limit: 2})
	if err != nil || len(page.Sandboxes) != 2 || page.NextPageToken == "" {
		t.Errorf("page of 2 of 5: %d sandboxes, next %q (%v)", len(page.Sandboxes), page.NextPageToken, err)
	}

	live, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), live.ID) })
	var chain []string
	for i := range 12 {
		sn, err := c.Snapshot(ctx, live.ID, api.CreateSnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.DeleteSnapshot(context.Background(), sn.ID) })
		if i > 0 && sn.Parent != chain[i-1] {
			t.Errorf("snapshot %d: parent %q, want %q", i, sn.Parent, chain[i-1])
		}
		chain = append(chain, sn.ID)
	}
	// Linear: a snapshot deep in the chain takes no more room in the list
	// than the first (with its whole lineage embedded, the 12th carried 11
	// more IDs).
	var list struct{ Snapshots []json.RawMessage }
	if err := json.Unmarshal(listBody(t, k.Key, "/v1/sandboxes/"+live.ID+"/snapshots"), &list); err != nil || len(list.Snapshots) != len(chain) {
		t.Fatalf("snapshot list: %d snapshots (%v), want %d", len(list.Snapshots), err, len(chain))
	}
	first, last := len(list.Snapshots[0]), len(list.Snapshots[len(chain)-1])
	if last > first+first/4 {
		t.Errorf("snapshot list: the 12th snapshot takes %d bytes, the first %d: each carries its chain", last, first)
	}
	lineage, err := c.Lineage(ctx, chain[len(chain)-1])
	if err != nil || len(lineage) != len(chain)-1 || lineage[0] != chain[len(chain)-2] || lineage[len(lineage)-1] != chain[0] {
		t.Errorf("lineage of the last snapshot = %v (%v), want the other 11, nearest first", lineage, err)
	}
}
