package fleet

import (
	"strings"
	"testing"
	"time"
)

// TestLeaseTiming: a timing that could let a sandbox run in two places is
// refused, saying which bound it breaks; zero fields take the defaults.
func TestLeaseTiming(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{}, ""},
		{Config{Heartbeat: 200 * time.Millisecond, Lease: time.Second, FenceAfter: 2 * time.Second}, ""},
		{Config{Heartbeat: 5 * time.Second, Lease: 5 * time.Second}, "heartbeat"},
		{Config{Lease: 5 * time.Second, FenceAfter: 5 * time.Second}, "fence-after"},
		{Config{Lease: 10 * time.Second, FenceAfter: 3 * time.Second}, "fence-after"},
	} {
		err := tc.c.Check()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Check(%+v) = %v, want %q", tc.c, err, tc.want)
		}
	}
	if d := (Config{Lease: 3 * time.Second}).withDefaults(); d.FenceAfter != 6*time.Second || d.Heartbeat != time.Second {
		t.Errorf("defaults: %+v", d)
	}
}
