package secrets

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warren/api"
	"warren/internal/store"
)

func newBox(t *testing.T) *Box {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	b, err := NewBox(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSealOpen(t *testing.T) {
	b := newBox(t)
	sealed := b.Seal("acme", "sec_x", 2, "hunter2")
	if bytes.Contains(sealed, []byte("hunter2")) {
		t.Fatal("the sealed value holds the value")
	}
	if v, err := b.Open("acme", "sec_x", 2, sealed); err != nil || v != "hunter2" {
		t.Fatalf("opened %q, %v", v, err)
	}
	for name, open := range map[string]func() error{
		"another tenant":  func() error { _, err := b.Open("other", "sec_x", 2, sealed); return err },
		"another secret":  func() error { _, err := b.Open("acme", "sec_y", 2, sealed); return err },
		"another version": func() error { _, err := b.Open("acme", "sec_x", 1, sealed); return err },
		"altered": func() error {
			bad := bytes.Clone(sealed)
			bad[len(bad)-1] ^= 1
			_, err := b.Open("acme", "sec_x", 2, bad)
			return err
		},
	} {
		if err := open(); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: %v, want an error without the value", name, err)
		}
	}
	if _, err := newBox(t).Open("acme", "sec_x", 2, sealed); !errors.Is(err, ErrOtherKey) {
		t.Errorf("another key: %v, want ErrOtherKey", err)
	}
}

func TestLoadKey(t *testing.T) {
	t.Setenv(KeyEnv, "")
	path := filepath.Join(t.TempDir(), "secrets.key")
	if _, err := LoadKey(path, false); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no key without create: %v", err)
	}
	a, err := LoadKey(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v, want 0600", fi, err)
	}
	b, err := LoadKey(path, true)
	if err != nil || a.id != b.id {
		t.Fatalf("a second load made another key: %v", err)
	}
	os.WriteFile(path, []byte("not hex\n"), 0o600)
	if _, err := LoadKey(path, true); err == nil {
		t.Error("a bad key file was taken")
	}
	t.Setenv(KeyEnv, strings.Repeat("ab", 32))
	if _, err := LoadKey(filepath.Join(t.TempDir(), "none"), false); err != nil {
		t.Errorf("the key from the environment: %v", err)
	}
}

func TestVault(t *testing.T) {
	ctx := t.Context()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := NewVault(st, newBox(t))
	sec, created, err := v.Set(ctx, "acme", "GitHub-Token", api.SetSecretRequest{Value: "v1", Metadata: map[string]string{"k": "x"}})
	if err != nil || !created || sec.Name != "github-token" || sec.Version != 1 {
		t.Fatalf("set: %+v %v %v", sec, created, err)
	}
	sec, created, err = v.Set(ctx, "acme", "github-token", api.SetSecretRequest{Value: "v2"})
	if err != nil || created || sec.Version != 2 || sec.Metadata["k"] != "x" {
		t.Fatalf("update: %+v %v %v (metadata is kept when absent)", sec, created, err)
	}
	if got, err := v.Get(ctx, "acme", sec.ID); err != nil || got.Name != "github-token" {
		t.Fatalf("get by ID: %+v %v", got, err)
	}
	vals, err := v.Resolve(ctx, "sb-x", "acme", []string{"github-token"})
	if err != nil || vals["github-token"] != "v2" {
		t.Fatalf("resolve: %v %v", vals, err)
	}
	if _, err := v.Resolve(ctx, "sb-x", "other", []string{"github-token"}); !api.IsCode(err, api.CodeBadRequest) {
		t.Errorf("another tenant resolves it: %v", err)
	}
	if _, err := v.Get(ctx, "other", "github-token"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("another tenant gets it: %v", err)
	}
	if _, _, err := v.Set(ctx, "acme", "sec_abc", api.SetSecretRequest{Value: "x"}); !api.IsCode(err, api.CodeBadRequest) {
		t.Errorf("a name like an ID: %v", err)
	}
	if _, _, err := v.Set(ctx, "acme", "x", api.SetSecretRequest{Value: "a\nb"}); !api.IsCode(err, api.CodeBadRequest) || strings.Contains(err.Error(), "a\nb") {
		t.Errorf("a value with a newline: %v", err)
	}
	if err := v.Delete(ctx, "acme", "GITHUB-TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, "acme", "github-token"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("a second delete: %v", err)
	}
	if list, err := v.List(ctx, "acme"); err != nil || len(list) != 0 {
		t.Errorf("list after delete: %v %v", list, err)
	}
}
