//go:build !linux

package oci

import "errors"

// Unpack needs openat2 (RESOLVE_IN_ROOT) to stay inside its directory.
var errNotLinux = errors.New("unpack: images are unpacked on Linux only")

type writer struct{}

func newWriter(string) (*writer, error)    { return nil, errNotLinux }
func (*writer) close()                     {}
func (*writer) startLayer()                {}
func (*writer) create(entry) (bool, error) { return false, errNotLinux }
func (*writer) whiteout(string) error      { return errNotLinux }
func (*writer) opaque(string) error        { return errNotLinux }
func (*writer) finish() error              { return errNotLinux }
