package client

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables FromEnv reads.
const (
	EnvURL     = "WARREN_URL"      // the server's base URL
	EnvAPIKey  = "WARREN_API_KEY"  // the API key
	EnvDataDir = "WARREN_DATA_DIR" // the local server's data directory
)

// Defaults of FromEnv.
const (
	DefaultURL     = "http://127.0.0.1:7777"
	DefaultDataDir = "/var/lib/warren"
	// AdminKeyFile is the file, in the server's data directory, that holds
	// its admin API key.
	AdminKeyFile = "admin.key"
)

// FromEnv returns a Client configured from the environment: the server at
// $WARREN_URL (default DefaultURL), with the key $WARREN_API_KEY. When that
// is unset and the server is on this machine (a loopback address), the key
// is the local server's admin key, read from admin.key in $WARREN_DATA_DIR
// (default /var/lib/warren); the admin key is never sent to another host
// unless asked for by $WARREN_API_KEY.
func FromEnv(opts ...Option) (*Client, error) {
	base := os.Getenv(EnvURL)
	if base == "" {
		base = DefaultURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s=%q: want a URL like %s", EnvURL, base, DefaultURL)
	}
	if key := os.Getenv(EnvAPIKey); key != "" {
		return New(base, key, opts...), nil
	}
	dir := os.Getenv(EnvDataDir)
	if dir == "" {
		dir = DefaultDataDir
	}
	file := filepath.Join(dir, AdminKeyFile)
	if !loopback(u.Hostname()) {
		return nil, fmt.Errorf("no API key: set %s (the admin key in %s is used only for a server on this machine, not %s)", EnvAPIKey, file, u.Host)
	}
	data, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("no API key: set %s, or run where the server's admin key %s exists (set %s for another data directory)", EnvAPIKey, file, EnvDataDir)
	case err != nil:
		return nil, fmt.Errorf("no API key: %s is unset and %w", EnvAPIKey, err)
	}
	key := strings.TrimSpace(string(data))
	if key == "" {
		return nil, fmt.Errorf("no API key: %s is unset and %s is empty", EnvAPIKey, file)
	}
	return New(base, key, opts...), nil
}

// loopback reports whether host names this machine's loopback interface.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
