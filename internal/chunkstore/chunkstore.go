// Package chunkstore is the layout of snapshot layers in a blob store, shared
// by the two things that write and read them: the snapshot engine and the
// block server of always-on disks. It names the objects (docs/LAYERS.md,
// "Objects in the blob store") and adapts a blob.Store to layer.Chunks. It
// does not decide what is live; the engine's collector does.
package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"warren/internal/blob"
	"warren/internal/layer"
)

// ChunkKey is the key of the chunk named name.
func ChunkKey(name string) string { return "chunks/" + name }

// ManifestKey is the key of layer id's manifest.
func ManifestKey(id string) string { return "manifests/" + id + ".json" }

// Store is a blob store holding layers: their chunks and manifests.
type Store struct {
	B blob.Store
	// RefreshAfter is the age past which a chunk that Put finds present is
	// written again: its new modification time keeps it from a collector
	// (on any node) that saw it unreferenced, until the manifest of the
	// writer's layer references it. Zero never rewrites.
	RefreshAfter time.Duration
}

var _ layer.Chunks = Store{}

// Put stores a chunk unless the store has it already: chunks are named by
// their content within a namespace, so forks and similar disks share them.
func (s Store) Put(ctx context.Context, name string, compressed []byte) (bool, error) {
	info, err := s.B.Stat(ctx, ChunkKey(name))
	if err == nil {
		if s.RefreshAfter > 0 && time.Since(info.ModTime) > s.RefreshAfter {
			return false, s.B.Put(ctx, ChunkKey(name), compressed)
		}
		return false, nil
	}
	if !errors.Is(err, blob.ErrNotFound) {
		return false, err
	}
	return true, s.B.Put(ctx, ChunkKey(name), compressed)
}

var _ layer.Present = Store{}

// Present says whether the chunk named name is stored, fresh (younger than
// RefreshAfter, when set: an older one is to be put again), and its size.
func (s Store) Present(ctx context.Context, name string) (int64, bool, error) {
	info, err := s.B.Stat(ctx, ChunkKey(name))
	if errors.Is(err, blob.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if s.RefreshAfter > 0 && time.Since(info.ModTime) > s.RefreshAfter {
		return 0, false, nil
	}
	return info.Size, true, nil
}

// Get returns the compressed chunk, or an error wrapping blob.ErrNotFound.
func (s Store) Get(ctx context.Context, name string) ([]byte, error) {
	return s.B.Get(ctx, ChunkKey(name))
}

// PutManifest stores m. Its chunks must all be stored already: a manifest
// never names a missing chunk.
func (s Store) PutManifest(ctx context.Context, m layer.Manifest) error {
	data, err := m.Marshal()
	if err != nil {
		return err
	}
	return s.B.Put(ctx, ManifestKey(m.ID), data)
}

// Manifest returns layer id's manifest, parsed and validated, or an error
// wrapping blob.ErrNotFound.
func (s Store) Manifest(ctx context.Context, id string) (layer.Manifest, error) {
	data, err := s.B.Get(ctx, ManifestKey(id))
	if err != nil {
		return layer.Manifest{}, err
	}
	m, err := layer.ParseManifest(data)
	if err != nil {
		return layer.Manifest{}, fmt.Errorf("manifest %s: %w", id, err)
	}
	if m.ID != id {
		return layer.Manifest{}, fmt.Errorf("manifest %s: names itself %s", id, m.ID)
	}
	return m, nil
}

// Manifests lists the IDs of the layers whose IDs start with prefix, in
// order.
func (s Store) Manifests(ctx context.Context, prefix string) ([]string, error) {
	infos, err := s.B.List(ctx, ManifestKey(prefix)[:len("manifests/")+len(prefix)])
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(infos))
	for _, info := range infos {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(info.Key, "manifests/"), ".json"); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// DeleteManifest removes layer id's manifest; a missing one is not an error.
func (s Store) DeleteManifest(ctx context.Context, id string) error {
	return s.B.Delete(ctx, ManifestKey(id))
}
