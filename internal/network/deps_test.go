package network

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the layering: the network is below the runtimes and the
// sandbox manager, which use it, and imports none of them.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, banned := range []string{"warren/internal/runtime", "warren/internal/sandbox", "warren/internal/daemon"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") {
				t.Errorf("network imports %s", dep)
			}
		}
	}
}
