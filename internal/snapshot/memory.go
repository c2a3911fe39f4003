package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"warren/internal/blob"
	"warren/internal/ident"
	"warren/internal/layer"
)

// Memory images. A paused sandbox's memory image (runtime.Pauser.Image: a
// file, or a directory of files) is stored as one layer a file, each over
// an empty disk in the tenant's namespace, so its chunks are compressed and
// shared with the tenant's other layers where the bytes are the same (the
// same sandbox's earlier pauses, most of all), and an index naming the
// layers and the format of the runtime that saved it:
//
//	images/<image>.json   the index (memoryIndex)
//
// The layers' manifests sit with the snapshots' (manifests/mi-…), so the
// collector keeps their chunks until DeleteImage marks them deleted.

// ErrImageFormat means a memory image was saved by a runtime of another
// format (runtime.Restorer) than the one asked for: it cannot be restored
// there.
var ErrImageFormat = errors.New("memory image of another format")

// MemoryImage is a memory image stored in the blob store.
type MemoryImage struct {
	ID     string
	Bytes  int64 // its files' sizes
	Stored int64 // compressed bytes this save stored anew
}

// memoryIndex is an image's index.
type memoryIndex struct {
	ID     string       `json:"id"`
	Tenant string       `json:"tenant"`
	Format string       `json:"format"`
	Dir    bool         `json:"dir"` // a directory of Files, else the one file
	Files  []memoryFile `json:"files"`
}

type memoryFile struct {
	Name  string `json:"name"` // in the directory; "" for a file image
	Layer string `json:"layer"`
	Size  int64  `json:"size"`
}

func imageKey(id string) string { return "images/" + id + ".json" }

// PutImage stores the memory image at path, saved by a runtime of format
// for one of tenant's sandboxes, and returns it once it is durable.
func (e *Engine) PutImage(ctx context.Context, tenant, format, path string) (MemoryImage, error) {
	t0 := time.Now()
	img := MemoryImage{ID: ident.New("mi-")}
	idx := memoryIndex{ID: img.ID, Tenant: tenant, Format: format}
	st, err := os.Stat(path)
	if err != nil {
		return MemoryImage{}, fmt.Errorf("memory image: %w", err)
	}
	files := []string{""}
	if st.IsDir() {
		idx.Dir = true
		entries, err := os.ReadDir(path)
		if err != nil {
			return MemoryImage{}, fmt.Errorf("memory image: %w", err)
		}
		files = files[:0]
		for _, ent := range entries {
			if !ent.Type().IsRegular() {
				return MemoryImage{}, fmt.Errorf("memory image: %s is not a regular file", ent.Name())
			}
			files = append(files, ent.Name())
		}
	}
	// The collector on this node waits for the manifests (with no grace,
	// it would take the chunks stored before them).
	e.gcMu.RLock()
	defer e.gcMu.RUnlock()
	for i, name := range files {
		f := memoryFile{Name: name, Layer: fmt.Sprintf("%s-%d", img.ID, i)}
		ranges, size, err := layer.FileRanges(filepath.Join(path, name))
		if err != nil {
			return MemoryImage{}, fmt.Errorf("memory image: %w", err)
		}
		extents, stats, err := layer.Write(ctx, filepath.Join(path, name), ranges, tenant, e.chunks(), e.cfg.Parallel)
		if err != nil {
			return MemoryImage{}, fmt.Errorf("memory image: %w", err)
		}
		m := layer.Manifest{Version: layer.Version(tenant), ID: f.Layer, Namespace: tenant,
			DiskSize: alignBlock(size), Extents: extents, Labels: map[string]string{"memory_image": img.ID}}
		if err := e.chunks().PutManifest(ctx, m); err != nil {
			return MemoryImage{}, fmt.Errorf("memory image: %w", err)
		}
		f.Size = size
		img.Bytes += size
		img.Stored += stats.Stored
		idx.Files = append(idx.Files, f)
	}
	data, err := json.Marshal(idx)
	if err == nil {
		err = e.blobs.Put(ctx, imageKey(img.ID), data)
	}
	if err != nil {
		e.deleteLayers(ctx, idx)
		return MemoryImage{}, fmt.Errorf("memory image: %w", err)
	}
	e.log.Info("memory image stored", "image", img.ID, "bytes", img.Bytes, "stored", img.Stored, "took", time.Since(t0))
	return img, nil
}

// GetImage fetches tenant's memory image id into path (which must not
// exist), as it was saved, if a runtime of format saved it: else an error
// wrapping ErrImageFormat.
func (e *Engine) GetImage(ctx context.Context, tenant, id, format, path string) error {
	idx, err := e.imageIndex(ctx, tenant, id)
	if err != nil {
		return err
	}
	if idx.Format != format || format == "" {
		return fmt.Errorf("memory image %s: %w: saved by %q, restored by %q", id, ErrImageFormat, idx.Format, format)
	}
	e.gcMu.RLock()
	defer e.gcMu.RUnlock()
	if idx.Dir {
		if err := os.Mkdir(path, 0o700); err != nil {
			return fmt.Errorf("memory image %s: %w", id, err)
		}
	}
	for _, f := range idx.Files {
		if err := e.getFile(ctx, f, filepath.Join(path, f.Name)); err != nil {
			os.RemoveAll(path)
			return fmt.Errorf("memory image %s: %w", id, err)
		}
	}
	return nil
}

// getFile fetches one file of an image into path.
func (e *Engine) getFile(ctx context.Context, f memoryFile, path string) error {
	m, err := e.chunks().Manifest(ctx, f.Layer)
	if err != nil {
		return err
	}
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := layer.Apply(ctx, path, m, e.chunks(), e.cfg.Parallel); err != nil {
		return err
	}
	return os.Truncate(path, f.Size)
}

// DeleteImage deletes tenant's memory image id: its index at once, its
// layers' chunks once the collector finds nothing else names them. An
// image that is gone already is no error.
func (e *Engine) DeleteImage(ctx context.Context, tenant, id string) error {
	idx, err := e.imageIndex(ctx, tenant, id)
	if errors.Is(err, blob.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := e.deleteLayers(ctx, idx); err != nil {
		return fmt.Errorf("delete memory image %s: %w", id, err)
	}
	if err := e.blobs.Delete(ctx, imageKey(id)); err != nil {
		return fmt.Errorf("delete memory image %s: %w", id, err)
	}
	e.log.Info("memory image deleted", "image", id)
	return nil
}

// deleteLayers marks the layers of image idx deleted, for the collector.
func (e *Engine) deleteLayers(ctx context.Context, idx memoryIndex) error {
	for _, f := range idx.Files {
		if err := e.blobs.Put(ctx, deletedKey(f.Layer), []byte(idx.Tenant)); err != nil {
			return err
		}
	}
	return nil
}

// imageIndex reads tenant's image id's index; another tenant's is not
// found.
func (e *Engine) imageIndex(ctx context.Context, tenant, id string) (memoryIndex, error) {
	var idx memoryIndex
	data, err := e.blobs.Get(ctx, imageKey(id))
	if err == nil {
		err = json.Unmarshal(data, &idx)
	}
	if err == nil && (idx.ID != id || idx.Tenant != tenant) {
		err = fmt.Errorf("%w: not tenant %s's", blob.ErrNotFound, tenant)
	}
	if err != nil {
		return memoryIndex{}, fmt.Errorf("memory image %s: %w", id, err)
	}
	return idx, nil
}

// alignBlock rounds n up to a layer block.
func alignBlock(n int64) int64 { return (n + layer.BlockSize - 1) &^ (layer.BlockSize - 1) }
