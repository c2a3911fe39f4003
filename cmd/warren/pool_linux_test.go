package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/wait"
)

// TestPoolCommands: an admin sets, lists and removes a warm pool; a
// tenant's key may not; a create then takes a member.
func TestPoolCommands(t *testing.T) {
	w := newWarren(t)
	if code, _, stderr := runCLI(t, nil, "pool", "set", "default", "--min", "1"); code != 1 || !strings.Contains(stderr, "admin") {
		t.Errorf("pool set with a tenant's key: exit %d stderr %q", code, stderr)
	}
	w.asAdmin()
	code, stdout, stderr := runCLI(t, nil, "pool", "set", "default", "--min", "1", "--max", "2", "--memory", "256", "--runtime", "container")
	if code != 0 || !strings.Contains(stdout, "pool default/container: min 1, max 2, 1 CPUs, 256 MiB") {
		t.Fatalf("pool set: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "pool", "set", "default", "--min", "3", "--max", "1"); code != 1 || !strings.Contains(stderr, "min <= max") {
		t.Errorf("pool set with max < min: exit %d stderr %q", code, stderr)
	}
	wait.For(t, 20*time.Second, "the member ready", func() bool {
		_, stdout, _ := runCLI(t, nil, "pool", "ls")
		return regexp.MustCompile(`(?m)^default +container +1 +256 MiB +64 MiB +1 +2 +1 +1 +0 +0$`).MatchString(stdout)
	})

	t.Setenv(client.EnvAPIKey, w.key)
	if code, stdout, stderr := runCLI(t, nil, "create", "--memory", "256"); code != 0 || !strings.HasPrefix(stdout, "sb-") {
		t.Fatalf("create: exit %d stdout %q stderr %q", code, stdout, stderr)
	}
	w.asAdmin()
	wait.For(t, 20*time.Second, "the hit counted", func() bool {
		var pools []api.Pool
		_, stdout, _ := runCLI(t, nil, "pool", "ls", "--json")
		return json.Unmarshal([]byte(stdout), &pools) == nil && len(pools) == 1 && pools[0].Hits == 1
	})
	if code, _, stderr := runCLI(t, nil, "pool", "rm", "default"); code != 0 {
		t.Errorf("pool rm: exit %d stderr %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "pool", "rm", "default"); code != 1 || !strings.Contains(stderr, "no pool") {
		t.Errorf("pool rm of no pool: exit %d stderr %q", code, stderr)
	}
}
