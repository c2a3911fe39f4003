//go:build linux

package mountinfo

import "os"

// Read parses /proc/self/mountinfo: the mounts of the calling process's
// mount namespace.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// ReadThread parses /proc/thread-self/mountinfo: the mounts of the calling
// thread's mount namespace, which differs from the process's on a thread
// that unshared its own.
func ReadThread() ([]Mount, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}
