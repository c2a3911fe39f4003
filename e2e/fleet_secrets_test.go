//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
)

// Secrets at egress in a fleet: the control replica keeps the key and the
// secrets; the node that runs the sandbox asks it for their values over
// the fleet's mutual TLS (internal/secrets TestFleetResolve checks that
// no other node gets them), and the sandbox's request arrives with the
// header.
func TestFleetSecrets(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFleet(t)
	const tenant = "fleet-secrets"
	snap := f.snapshots(map[string]string{tenant: ""})[tenant]
	b := make([]byte, 32)
	rand.Read(b)
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fleetAddr := ln.Addr().String()
	ln.Close()
	c1 := f.startControl("c1", "--secrets-key", keyFile, "--fleet-listen", fleetAddr)
	f.startNode("n1", "r1", "r1-a", "--control-secrets", fleetAddr)
	f.settle()
	f.logPhase("the fleet started")

	k, err := c1.client().CreateKey(ctx, api.CreateKeyRequest{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(c1.url, k.Key)
	rand.Read(b[:12])
	value := "fleet-" + hex.EncodeToString(b[:12])
	if _, err := c.SetSecret(ctx, "tok", api.SetSecretRequest{Value: value}); err != nil {
		t.Fatal(err)
	}
	rules := func(secret string) *api.NetworkPolicy {
		return &api.NetworkPolicy{Rules: map[string][]api.NetworkRule{"api.secrets.test": {{Transform: &api.Transform{
			Headers: map[string]string{"Authorization": "Bearer ${secrets." + secret + "}"}}}}}}
	}
	if _, err := c.Restore(ctx, snap, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Network: rules("nope")}}); !api.IsCode(err, api.CodeBadRequest) {
		t.Fatalf("a rule naming a missing secret: %v, want a 400", err)
	}
	sbs, err := c.Restore(ctx, snap, api.RestoreRequest{SandboxSpec: api.SandboxSpec{Network: rules("tok")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), sbs[0].ID) })
	if h := headersSeen(t, c, sbs[0].ID, "curl -sS https://api.secrets.test/headers"); h["authorization"] != hashHeader("Bearer "+value) {
		t.Errorf("the server got %v, want the secret from the control replica", h)
	}
	if strings.Contains(f.nodes["n1"].log.String(), value) || strings.Contains(c1.log.String(), value) {
		t.Error("a member's log holds the secret")
	}
}
