package client

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, AdminKeyFile), []byte("admin-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	tests := []struct {
		name            string
		url, key, data  string
		wantAuth        string
		wantErrContains []string
	}{
		{name: "key from the environment", url: srv.URL, key: "env-key", data: dir, wantAuth: "Bearer env-key"},
		{name: "admin key file", url: srv.URL, data: dir, wantAuth: "Bearer admin-key"},
		{name: "no key anywhere", url: srv.URL, data: empty,
			wantErrContains: []string{"WARREN_API_KEY", filepath.Join(empty, "admin.key")}},
		{name: "admin key never leaves the machine", url: "http://10.1.2.3:7777", data: dir,
			wantErrContains: []string{"WARREN_API_KEY", "10.1.2.3"}},
		{name: "not a URL", url: "127.0.0.1:7777", key: "k", wantErrContains: []string{"WARREN_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvURL, tt.url)
			t.Setenv(EnvAPIKey, tt.key)
			t.Setenv(EnvDataDir, tt.data)
			gotAuth = ""
			c, err := FromEnv()
			if len(tt.wantErrContains) > 0 {
				if err == nil {
					t.Fatal("FromEnv succeeded, want an error")
				}
				for _, s := range tt.wantErrContains {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if err := c.Health(t.Context()); err != nil {
				t.Fatal(err)
			}
			if gotAuth != tt.wantAuth {
				t.Errorf("Authorization %q, want %q", gotAuth, tt.wantAuth)
			}
		})
	}
}

func TestFromEnvDefaults(t *testing.T) {
	t.Setenv(EnvURL, "")
	t.Setenv(EnvAPIKey, "k")
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.base != DefaultURL {
		t.Errorf("base %q, want %q", c.base, DefaultURL)
	}
	t.Setenv(EnvAPIKey, "")
	t.Setenv(EnvDataDir, "")
	if _, err := FromEnv(); err != nil && !strings.Contains(err.Error(), filepath.Join(DefaultDataDir, AdminKeyFile)) {
		t.Errorf("error %q does not name the default key file", err)
	}
}
