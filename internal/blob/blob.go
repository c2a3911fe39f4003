// Package blob is the contract between the snapshot engine and the object
// storage that holds snapshot chunks and manifests: a flat namespace of keys
// to immutable byte strings, as a local directory, S3 or any S3-compatible
// server offers it. The backends live in blob/file and blob/s3; blobtest is
// the suite every backend must pass. This package does not know what the
// objects mean.
package blob

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound means no object has the key.
var ErrNotFound = errors.New("blob not found")

// Info describes one stored object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Store is a bucket of objects. Every method may be called concurrently and
// repeated: a Put of the same key and bytes twice, or a Delete of a missing
// key, succeeds.
type Store interface {
	// Put stores data under key, replacing any object there. It is atomic:
	// a reader sees the whole old object or the whole new one, never a part,
	// and a Put that fails or is cancelled leaves no partial object.
	Put(ctx context.Context, key string, data []byte) error
	// Get returns the object's bytes, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Stat returns the object's size and modification time, or an error
	// wrapping ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns every object whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Info, error)
	// String names the store for logs and status, without secrets.
	String() string
	// Close releases the store's resources.
	Close() error
}
