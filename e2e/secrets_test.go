//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"warren/api"
	"warren/client"
	"warren/internal/layer"
)

// Secrets at egress (docs/NETWORK.md): the peers' threat list turned into
// checks, on each runtime of the escape suite. A tenant's secret reaches
// the test internet's HTTPS server in the header its rule names, from
// curl and from Python; the sandbox never holds it; nothing but the rule's
// destination gets it.
func TestSecretsAtEgress(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		ctx := context.Background()
		b := make([]byte, 12)
		rand.Read(b)
		value := "tok-" + hex.EncodeToString(b)
		owner := tenantClient(t, "secrets-"+rt)
		if _, err := owner.SetSecret(ctx, "api-token", api.SetSecretRequest{Value: value}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { owner.DeleteSecret(ctx, "api-token") })
		rules := map[string][]api.NetworkRule{
			"api.secrets.test": {{Transform: &api.Transform{Headers: map[string]string{"Authorization": "Bearer ${secrets.api-token}", "X-Plain": "literal"}}}},
			"*.wild.test":      {{Transform: &api.Transform{Headers: map[string]string{"X-Wild": "${e2b.secrets.API-Token}"}}}},
			untrustedName:      {{Transform: &api.Transform{Headers: map[string]string{"Authorization": "${secrets.api-token}"}}}},
		}
		sb, err := owner.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: rt, Network: &api.NetworkPolicy{Rules: rules}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { owner.DeleteSandbox(ctx, sb.ID) })
		bearer := hashHeader("Bearer " + value)

		t.Run("injected", func(t *testing.T) {
			for name, cmd := range map[string]string{
				"curl":           "curl -sS https://api.secrets.test/headers",
				"python":         `python3 -c "import urllib.request; print(urllib.request.urlopen('https://api.secrets.test/headers').read().decode())"`,
				"plain http":     "curl -sS http://api.secrets.test/headers",
				"replaced":       "curl -sS -H 'Authorization: mine' https://api.secrets.test/headers",
				"after redirect": "curl -sS -L 'https://api.secrets.test/redirect?to=/headers'",
			} {
				h := headersSeen(t, owner, sb.ID, cmd)
				if h["authorization"] != bearer || h["x-plain"] != hashHeader("literal") {
					t.Errorf("%s: the server got %v, want Authorization of the secret and X-Plain", name, h)
				}
			}
			for _, host := range []string{"a.wild.test", "b.a.wild.test"} {
				if h := headersSeen(t, owner, sb.ID, "curl -sS https://"+host+"/headers"); h["x-wild"] != hashHeader(value) {
					t.Errorf("%s: X-Wild %q, want the secret's (a wildcard matches at any depth)", host, h["x-wild"])
				}
			}
		})

		t.Run("not injected elsewhere", func(t *testing.T) {
			// These names resolve to the same server, but have no rule: the
			// connection passes through untouched (the sandbox does not
			// trust the test internet's CA, hence -k).
			for _, host := range []string{"other.secrets.test", "wild.test", "wild.test.evil.test"} {
				h := headersSeen(t, owner, sb.ID, "curl -sSk -H 'Authorization: Bearer ${secrets.api-token}' https://"+host+"/headers")
				if h["authorization"] != hashHeader("Bearer ${secrets.api-token}") || h["x-wild"] != "" {
					t.Errorf("%s: the server got %v: a rule was applied to a destination without one", host, h)
				}
			}
			h := headersSeen(t, owner, sb.ID, "curl -sSkL 'https://api.secrets.test/redirect?to=https://other.secrets.test/headers'")
			if h["host"] != "other.secrets.test" || h["authorization"] != "" {
				t.Errorf("a redirect to another host carried %v", h)
			}
		})

		t.Run("upstream verified", func(t *testing.T) {
			before := len(inet.secureSeen())
			res := run(t, owner, sb.ID, "curl -sS -o /dev/stderr -w '%{http_code}' https://"+untrustedName+"/")
			if res.Stdout != "502" || !strings.Contains(res.Stderr, "failed verification") {
				t.Errorf("an unverified upstream answered %q: %s", res.Stdout, res.Stderr)
			}
			for _, r := range inet.secureSeen()[before:] {
				if r.Addr == inetUntrusted {
					t.Errorf("a request reached the unverified server: %+v", r)
				}
			}
		})

		t.Run("the sandbox holds no secret", func(t *testing.T) {
			// The value is given reversed, so that no command line holds it,
			// and turned round in a shell variable that is not exported.
			rev := []byte(value)
			slices.Reverse(rev)
			res := run(t, owner, sb.ID, `v=$(echo `+string(rev)+` | rev)
				env | grep -F "$v"
				for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -qaF "$v" "$f" 2>/dev/null && echo "$f"; done
				grep -rlaF "$v" /etc /root /home /tmp /var /usr/local /opt /srv /run 2>/dev/null
				true`)
			if strings.TrimSpace(res.Stdout) != "" {
				t.Errorf("the sandbox found the secret in:\n%s", res.Stdout)
			}
			// What the sandbox writes is found in its snapshot: the search
			// below can find what is there.
			marker := "marker-" + hex.EncodeToString(b)
			if res := run(t, owner, sb.ID, "echo "+marker+" > /root/marker && sync"); res.ExitCode != 0 {
				t.Fatalf("write the marker: %+v", res)
			}
			sn, err := owner.Snapshot(ctx, sb.ID, api.CreateSnapshotRequest{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { owner.DeleteSnapshot(ctx, sn.ID) })
			if !fileHas(t, filepath.Join(shared.dataDir, "disks/snapshots/"+sn.ID+".img"), marker) {
				t.Fatal("the snapshot's image does not show what the sandbox wrote: the search finds nothing")
			}
			for _, img := range []string{"disks/snapshots/" + sn.ID + ".img", "disks/sandboxes/" + sb.ID + ".img"} {
				if fileHas(t, filepath.Join(shared.dataDir, img), value) {
					t.Errorf("%s holds the secret", img)
				}
			}
			if fileHas(t, filepath.Join(shared.dataDir, "warren.db"), value) {
				t.Error("the database holds the secret in the clear")
			}
			if strings.Contains(shared.log.String(), value) {
				t.Error("the daemon's log holds the secret")
			}
		})

		t.Run("tenants", func(t *testing.T) {
			other := tenantClient(t, "secrets-other-"+rt)
			_, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: rt, Network: &api.NetworkPolicy{Rules: rules}}})
			if !api.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), "api-token") {
				t.Errorf("another tenant naming the secret: %v, want a 400 naming it", err)
			}
			list, err := other.ListSecrets(ctx)
			if err != nil || len(list) != 0 {
				t.Errorf("another tenant lists %v, %v", list, err)
			}
		})

		t.Run("rules set later", func(t *testing.T) {
			plain, err := owner.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: rt}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { owner.DeleteSandbox(ctx, plain.ID) })
			if h := headersSeen(t, owner, plain.ID, "curl -sSk https://api.secrets.test/headers"); h["authorization"] != "" {
				t.Fatalf("a sandbox without rules sent %v", h)
			}
			if _, err := owner.SetNetwork(ctx, plain.ID, api.NetworkPolicy{Rules: rules}); err != nil {
				t.Fatal(err)
			}
			if h := headersSeen(t, owner, plain.ID, "curl -sS https://api.secrets.test/headers"); h["authorization"] != bearer {
				t.Errorf("after the network update the server got %v", h)
			}
		})

		t.Run("deleted", func(t *testing.T) {
			if err := owner.DeleteSecret(ctx, "api-token"); err != nil {
				t.Fatal(err)
			}
			_, err := owner.CreateSandbox(ctx, api.CreateSandboxRequest{SandboxSpec: api.SandboxSpec{Runtime: rt, Network: &api.NetworkPolicy{Rules: rules}}})
			if !api.IsCode(err, api.CodeBadRequest) {
				t.Errorf("rules naming a deleted secret: %v, want a 400", err)
			}
		})
	})
}

// run runs shell command cmd in sandbox id as cl's tenant.
func run(t *testing.T, cl *client.Client, id, cmd string) *api.ExecResult {
	t.Helper()
	res, err := cl.Exec(context.Background(), id, api.ExecRequest{Shell: cmd, TimeoutMs: 60000})
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return res
}

// headersSeen runs cmd, which fetches /headers of a secure server, in
// sandbox id and returns what the server said it got.
func headersSeen(t *testing.T, cl *client.Client, id, cmd string) map[string]string {
	t.Helper()
	res := run(t, cl, id, cmd)
	var h map[string]string
	if res.ExitCode != 0 || json.Unmarshal([]byte(res.Stdout), &h) != nil {
		t.Fatalf("%s: exit %d: %s %s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return h
}

// fileHas reports whether the file at path holds s, reading only the
// runs of a sparse file that hold data.
func fileHas(t *testing.T, path, s string) bool {
	t.Helper()
	ranges, _, err := layer.FileRanges(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	for _, r := range ranges {
		// Each read overlaps the one before by len(s)-1 bytes, so that a
		// match across reads is found.
		for off := r.Off; off < r.Off+r.Len; off += int64(len(buf) - len(s) + 1) {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), r.Off+r.Len-off)], off)
			if bytes.Contains(buf[:n], []byte(s)) {
				return true
			}
			if err != nil {
				break
			}
		}
	}
	return false
}
