package layer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Bounds on a manifest's labels.
const (
	MaxLabels     = 64
	MaxLabelKey   = 128
	MaxLabelValue = 4096
	// MaxIDLen bounds a layer ID.
	MaxIDLen = 128
)

// ParseManifest decodes and validates a manifest. It is strict: unknown
// fields, trailing data and anything Validate refuses are errors. Empty
// extents and labels come back nil.
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("parse manifest: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Manifest{}, errors.New("parse manifest: data after the manifest")
	}
	if len(m.Extents) == 0 {
		m.Extents = nil
	}
	if len(m.Labels) == 0 {
		m.Labels = nil
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, fmt.Errorf("parse manifest: %w", err)
	}
	return m, nil
}

// Marshal validates the manifest and encodes it as JSON.
func (m Manifest) Marshal() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("marshal manifest: %w", err)
	}
	if m.Extents == nil {
		m.Extents = []Extent{} // "extents": [], not null
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal manifest: %w", err)
	}
	return b, nil
}

// Validate checks everything the format requires of a manifest; its errors
// name the offending field or extent.
func (m Manifest) Validate() error {
	switch m.Version {
	case VersionPlain:
		if m.Namespace != "" {
			return fmt.Errorf("namespace %q in a version %d manifest, want version %d", m.Namespace, VersionPlain, VersionNamespaced)
		}
	case VersionNamespaced:
		if err := validNamespace(m.Namespace); err != nil {
			return fmt.Errorf("namespace: %w", err)
		}
	default:
		return fmt.Errorf("version %d, want %d or %d", m.Version, VersionPlain, VersionNamespaced)
	}
	if err := validID(m.ID); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	if m.Parent != "" {
		if err := validID(m.Parent); err != nil {
			return fmt.Errorf("parent: %w", err)
		}
		if m.Parent == m.ID {
			return errors.New("parent: the layer's own id")
		}
	}
	switch {
	case m.DiskSize <= 0:
		return fmt.Errorf("disk_size %d: not positive", m.DiskSize)
	case m.DiskSize%BlockSize != 0:
		return fmt.Errorf("disk_size %d: not a multiple of %d", m.DiskSize, BlockSize)
	case m.DiskSize > MaxDiskSize:
		return fmt.Errorf("disk_size %d: over %d", m.DiskSize, int64(MaxDiskSize))
	}
	if len(m.Extents) > MaxExtents {
		return fmt.Errorf("%d extents: over %d", len(m.Extents), MaxExtents)
	}
	var end int64
	for i, e := range m.Extents {
		if err := validExtent(e, end, m.DiskSize); err != nil {
			return fmt.Errorf("extent %d (offset %d): %w", i, e.Offset, err)
		}
		end = e.End()
	}
	return validLabels(m.Labels)
}

// validExtent checks one extent, which must start at or after prevEnd.
func validExtent(e Extent, prevEnd, diskSize int64) error {
	switch {
	case e.Offset < 0 || e.Offset%BlockSize != 0:
		return fmt.Errorf("offset not a non-negative multiple of %d", BlockSize)
	case e.Offset < prevEnd:
		return fmt.Errorf("overlaps or precedes the previous extent, which ends at %d", prevEnd)
	case e.Length <= 0 || e.Length > MaxChunk:
		return fmt.Errorf("length %d: not in (0, %d]", e.Length, MaxChunk)
	case e.Length%BlockSize != 0:
		return fmt.Errorf("length %d: not a multiple of %d", e.Length, BlockSize)
	case e.Offset > diskSize-e.Length:
		return fmt.Errorf("ends at %d, past disk_size %d", e.End(), diskSize)
	}
	if e.Zero {
		if e.Chunk != "" || e.Stored != 0 {
			return errors.New("zero extent with a chunk or stored size")
		}
		return nil
	}
	if !validHash(e.Chunk) {
		return fmt.Errorf("chunk %q: not 64 lowercase hex digits", e.Chunk)
	}
	if e.Stored <= 0 || e.Stored > MaxStored {
		return fmt.Errorf("stored %d: not in (0, %d]", e.Stored, MaxStored)
	}
	return nil
}

// validID checks a layer ID: 1 to MaxIDLen bytes of [a-z0-9-].
func validID(id string) error {
	if id == "" {
		return errors.New("empty")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%d bytes: over %d", len(id), MaxIDLen)
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("%q: only a-z, 0-9 and - allowed", id)
		}
	}
	return nil
}

// validNamespace checks a version 2 manifest's namespace: 1 to MaxNamespace
// bytes of [a-z0-9_-] (a tenant's name).
func validNamespace(ns string) error {
	if ns == "" {
		return errors.New("empty")
	}
	if len(ns) > MaxNamespace {
		return fmt.Errorf("%d bytes: over %d", len(ns), MaxNamespace)
	}
	for _, c := range []byte(ns) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%q: only a-z, 0-9, _ and - allowed", ns)
		}
	}
	return nil
}

// validHash reports whether h is a chunk name: 256 bits in lowercase hex.
func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, c := range []byte(h) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func validLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels: over %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		// JSON cannot carry invalid UTF-8 unchanged, so refuse it here
		// rather than let Marshal alter it.
		switch {
		case k == "" || len(k) > MaxLabelKey || !utf8.ValidString(k):
			return fmt.Errorf("label key %q: want 1 to %d bytes of UTF-8", k, MaxLabelKey)
		case len(v) > MaxLabelValue || !utf8.ValidString(v):
			return fmt.Errorf("label %q: value of %d bytes, want at most %d of UTF-8", k, len(v), MaxLabelValue)
		}
	}
	return nil
}

// Chunks returns the distinct chunk names the manifest refers to, in the
// order of their first extent.
func (m Manifest) Chunks() []string {
	seen := make(map[string]bool)
	var hashes []string
	for _, e := range m.Extents {
		if e.Zero || seen[e.Chunk] {
			continue
		}
		seen[e.Chunk] = true
		hashes = append(hashes, e.Chunk)
	}
	return hashes
}
