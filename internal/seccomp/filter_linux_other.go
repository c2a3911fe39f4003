//go:build linux && !amd64

package seccomp

import (
	"errors"
	"runtime"

	"golang.org/x/net/bpf"
)

// rules is empty: the filter is written for x86_64 syscall numbers only.
var rules []rule

// Program fails on this architecture, and so does Install: a container
// sandbox must not start without its filter.
func Program() ([]bpf.RawInstruction, error) {
	return nil, errors.New("seccomp filter: not written for " + runtime.GOARCH + ", only amd64")
}
