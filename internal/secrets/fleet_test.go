package secrets

import (
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/internal/pki"
	"warren/internal/pki/pkitest"
	"warren/internal/store"
)

// A node resolves secrets through a control replica only for a sandbox
// the store places on it; any node of the fleet may ask which names a
// tenant lacks, and nothing else of the fleet may ask at all.
func TestFleetResolve(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := NewVault(st, newBox(t))
	if _, _, err := v.Set(ctx, "acme", "tok", api.SetSecretRequest{Value: "v1"}); err != nil {
		t.Fatal(err)
	}
	rec := store.Sandbox{ID: "sb-aaaaaaaaaaaaaaaaaaaa", Tenant: "acme", Template: "default", Runtime: "container",
		State: api.StateStarting, Node: "n1", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
	if err := st.InsertSandbox(ctx, &rec); err != nil {
		t.Fatal(err)
	}

	ca := pkitest.CA(t, "test")
	control := pkitest.Member(t, ca, pki.Identity{Role: pki.Control, Name: "c1"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: v.FleetHandler(slog.New(slog.DiscardHandler)), TLSConfig: control.ServerConfig(pki.Node)}
	go hs.ServeTLS(ln, "", "")
	defer hs.Close()
	// The first address answers nothing: the next is tried.
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	dead.Close()
	addrs := []string{dead.Addr().String(), ln.Addr().String()}

	n1 := NewRemote(pkitest.Member(t, ca, pki.Identity{Role: pki.Node, Name: "n1"}), addrs)
	n2 := NewRemote(pkitest.Member(t, ca, pki.Identity{Role: pki.Node, Name: "n2"}), addrs)
	if vals, err := n1.Resolve(ctx, rec.ID, "acme", []string{"tok"}); err != nil || vals["tok"] != "v1" {
		t.Fatalf("the sandbox's node: %v %v", vals, err)
	}
	if _, err := n2.Resolve(ctx, rec.ID, "acme", []string{"tok"}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("another node: %v, want refused", err)
	}
	if _, err := n1.Resolve(ctx, rec.ID, "other", []string{"tok"}); err == nil {
		t.Error("the sandbox's node resolved another tenant's secret")
	}
	if _, err := n1.Resolve(ctx, rec.ID, "acme", []string{"tok", "nope"}); !api.IsCode(err, api.CodeBadRequest) {
		t.Errorf("a missing secret: %v, want a 400", err)
	}
	if err := n2.Check(ctx, "acme", []string{"tok"}); err != nil {
		t.Errorf("check: %v", err)
	}
	if err := n2.Check(ctx, "acme", []string{"nope"}); !api.IsCode(err, api.CodeBadRequest) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("check of a missing name: %v", err)
	}
	// A control replica's certificate is not a node's.
	other := NewRemote(pkitest.Member(t, ca, pki.Identity{Role: pki.Control, Name: "c2"}), addrs[1:])
	if _, err := other.Resolve(ctx, rec.ID, "acme", []string{"tok"}); err == nil {
		t.Error("a control replica's certificate resolved secrets")
	}
	// Nor is anything of another fleet's CA.
	stranger := NewRemote(pkitest.Member(t, pkitest.CA(t, "other"), pki.Identity{Role: pki.Node, Name: "n1"}), addrs[1:])
	if _, err := stranger.Resolve(ctx, rec.ID, "acme", []string{"tok"}); err == nil {
		t.Error("another fleet's node resolved secrets")
	}
	if _, err := st.Transition(ctx, rec.ID, store.Transition{From: []string{api.StateStarting}, To: api.StateStopped}); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Resolve(ctx, rec.ID, "acme", []string{"tok"}); err == nil {
		t.Error("a stopped sandbox's node resolved its secrets")
	}
}
