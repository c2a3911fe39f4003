// Package blobspec opens a blob store from the string an operator gives
// (`--blob-store`, `--cluster-store`): a directory, a file:// URL or an s3://
// URL. It exists so that every process of a node opens the same store the
// same way; it knows no store's internals.
package blobspec

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"warren/internal/blob"
	fileblob "warren/internal/blob/file"
	s3blob "warren/internal/blob/s3"
)

// Open opens the store spec names, or the directory dir when spec is
// empty: a directory path or file:///dir, or s3://bucket?endpoint=URL&…
// with credentials from the AWS_* environment. Every call is retried on
// failure, with backoff.
func Open(ctx context.Context, spec, dir string, log *slog.Logger) (blob.Store, error) {
	var b blob.Store
	var err error
	switch {
	case spec == "":
		b, err = fileblob.Open(dir)
	case strings.HasPrefix(spec, "s3://"):
		b, err = s3blob.Open(ctx, spec)
	case strings.HasPrefix(spec, "file://"):
		b, err = fileblob.Open(strings.TrimPrefix(spec, "file://"))
	case strings.Contains(spec, "://"):
		err = fmt.Errorf("unknown scheme in %q (want a directory, file:// or s3://)", spec)
	default:
		b, err = fileblob.Open(spec)
	}
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	return blob.Retry{Store: b, Attempts: 6, Base: 200 * time.Millisecond, Max: 5 * time.Second, Log: log}, nil
}
