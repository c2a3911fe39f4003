package buildspec

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
)

// Keys returns the cache key of each step ("sha256:" and 64 hex digits):
// key[i] hashes key[i-1] (base for the first step), the step's canonical
// form, the State it runs in and, for a copy step, ctx's hash of its source.
// So a step's key changes when anything it depends on changes, and with it
// the key of every step after it, and no key before it changes.
//
// base is the digest of what From resolved to; the builder supplies it.
// Metadata-only steps have keys too, which chain; the builder snapshots only
// after layered steps. A step's Line, the spec's Network, Start and Limits
// are not in any key: they do not change what a step makes. ctx may be nil
// when no step copies. Keys validates s first.
func (s *Spec) Keys(base string, ctx Context) ([]string, error) {
	if base == "" {
		return nil, errors.New("cache keys: no base digest")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	each, _ := s.States()
	keys := make([]string, len(s.Steps))
	prev := base
	for i, st := range s.Steps {
		h := sha256.New()
		w := keyWriter{h}
		w.str("warren buildspec step v1")
		w.str(prev)
		st.canonical(w)
		each[i].canonical(w)
		if st.Kind == KindCopy {
			if ctx == nil {
				return nil, fmt.Errorf("cache keys: step %d copies %s but there is no build context", i+1, st.Src)
			}
			sum, err := ctx.Hash(st.Src)
			if err != nil {
				return nil, fmt.Errorf("cache keys: step %d: %w", i+1, err)
			}
			w.str(sum)
		}
		prev = "sha256:" + hex.EncodeToString(h.Sum(nil))
		keys[i] = prev
	}
	return keys, nil
}

// canonical writes every field of the step but Line, each tagged with its
// name, so that two steps that differ in any field that matters differ in
// what is written.
func (st Step) canonical(w keyWriter) {
	w.str("kind")
	w.str(string(st.Kind))
	w.str("packages")
	w.strs(st.Packages)
	w.str("index_url")
	w.str(st.IndexURL)
	w.str("extra_index_url")
	w.str(st.ExtraIndexURL)
	w.str("src")
	w.str(st.Src)
	w.str("dest")
	w.str(st.Dest)
	w.str("mode")
	if st.Mode == nil {
		w.u64(1 << 32) // no mode: not any uint32
	} else {
		w.u64(uint64(*st.Mode))
	}
	w.str("owner")
	w.str(st.Owner)
	w.str("shell")
	w.str(st.Shell)
	w.str("argv")
	if st.Argv == nil {
		w.u64(1 << 32) // a shell command, not an empty argv
	} else {
		w.strs(st.Argv)
	}
	w.str("env")
	w.env(st.Env)
	w.str("dir")
	w.str(st.Dir)
	w.str("user")
	w.str(st.User)
}

func (s State) canonical(w keyWriter) {
	w.str("state env")
	w.env(s.Env)
	w.str("state workdir")
	w.str(s.Workdir)
	w.str("state user")
	w.str(s.User)
}

// keyWriter writes values into a hash unambiguously: every string and list
// is preceded by its length.
type keyWriter struct{ h hash.Hash }

func (w keyWriter) u64(v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	w.h.Write(b[:])
}

func (w keyWriter) str(s string) {
	w.u64(uint64(len(s)))
	io.WriteString(w.h, s)
}

func (w keyWriter) strs(l []string) {
	w.u64(uint64(len(l)))
	for _, s := range l {
		w.str(s)
	}
}

func (w keyWriter) env(m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.u64(uint64(len(keys)))
	for _, k := range keys {
		w.str(k)
		w.str(m[k])
	}
}
