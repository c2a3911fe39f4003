//go:build linux

package mountinfo

import (
	"slices"
	"testing"
)

func TestReadHasRoot(t *testing.T) {
	mounts, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mounts, func(m Mount) bool { return m.Point == "/" }) {
		t.Errorf("Read = %+v, want a mount at /", mounts)
	}
}
