//go:build !linux

package blockdev

import "os"

// zeroRange makes [off, off+n) of f read as zeros by writing them.
func zeroRange(f *os.File, off, n int64) error {
	zeros := make([]byte, min(n, 1<<20))
	for end := off + n; off < end; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), end-off)], off); err != nil {
			return err
		}
	}
	return nil
}
