package tenanttpl

import "sync"

// scratchStep is how much more free disk a scratch holds each time what
// it writes passes what it holds: few statfs calls, and little held for
// nothing.
const scratchStep = 256 << 20

// scratch is the free disk that one build or import holds for the files it
// writes, grown as it writes them (HoldScratch holds a known bound at
// once): an import that unpacks 30 MiB holds 256 MiB, one that unpacks
// 16 GiB holds 16 GiB, and neither takes the node's disk below its reserve
// beside the others. It is safe for concurrent use.
type scratch struct {
	// hold holds n more bytes of the node's free disk
	// (Sandboxes.HoldScratch).
	hold func(n int64, what string) (release func(), err error)
	what string // what is refused, for the error: "image imports are"

	mu       sync.Mutex
	held     int64    // bytes held; guarded by mu
	used     int64    // bytes counted by add; guarded by mu
	releases []func() // guarded by mu
}

func (tt *Templates) newScratch(what string) *scratch {
	return &scratch{hold: tt.deps.Sandboxes.HoldScratch, what: what}
}

// add counts n more bytes about to be written, holding more of the node's
// free disk when they pass what is held; past the node's reserve it
// returns the 507 error of HoldScratch and counts nothing.
func (s *scratch) add(n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used+n > s.held {
		more := max(s.used+n-s.held, scratchStep)
		release, err := s.hold(more, s.what)
		if err != nil {
			return err
		}
		s.held += more
		s.releases = append(s.releases, release)
	}
	s.used += n
	return nil
}

// Write counts what is written through it, for io.MultiWriter.
func (s *scratch) Write(p []byte) (int, error) {
	if err := s.add(int64(len(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// release gives back everything held.
func (s *scratch) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.releases {
		r()
	}
	s.releases, s.held, s.used = nil, 0, 0
}
