//go:build !linux

package layer

import (
	"errors"
	"os"
)

// physMap without FIEMAP: the whole file is data shared with nothing, so
// Changed compares every block.
func physMap(f *os.File, size int64) ([]mapping, error) { return dataMap(f, size) }

// dataMap without SEEK_DATA: the whole file is data.
func dataMap(f *os.File, size int64) ([]mapping, error) {
	if size == 0 {
		return nil, nil
	}
	return []mapping{{off: 0, len: size}}, nil
}

// punchHole is unsupported: Apply writes zeros instead.
func punchHole(f *os.File, off, n int64) error { return errors.ErrUnsupported }
