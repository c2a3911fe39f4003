package api

import (
	"strings"
	"testing"
)

func TestCheckSnapshotName(t *testing.T) {
	for _, tc := range []struct {
		name string
		why  string // "" for a valid name
	}{
		{"a", ""},
		{"build-1", ""},
		{"Nightly_2026.05.01", ""},
		{"9lives", ""},
		{strings.Repeat("x", 63), ""},
		{"sn", ""},
		{"snap-1", ""},
		{"", "1 to 63"},
		{strings.Repeat("x", 64), "1 to 63"},
		{"sn-abcdefghijklmnopqrst", `cannot start with "sn-"`},
		{"sn-mine", `cannot start with "sn-"`},
		{"-x", "start with a letter or a digit"},
		{".hidden", "start with a letter or a digit"},
		{"a/b", "only letters"},
		{"a b", "only letters"},
		{"a:tag", "only letters"},
		{"é", "start with a letter or a digit"},
		{"aé", "only letters"},
		{"../x", "start with a letter or a digit"},
	} {
		err := CheckSnapshotName(tc.name)
		switch {
		case tc.why == "" && err != nil:
			t.Errorf("CheckSnapshotName(%q) = %v, want nil", tc.name, err)
		case tc.why != "" && (!IsCode(err, CodeBadRequest) || !strings.Contains(err.Error(), tc.why)):
			t.Errorf("CheckSnapshotName(%q) = %v, want a bad_request saying %q", tc.name, err, tc.why)
		}
	}
}
