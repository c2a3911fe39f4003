// Package s3 is the blob store on S3 or any S3-compatible server (MinIO,
// versitygw, Ceph RGW…), through gocloud.dev/blob and its s3blob driver:
// the snapshot store that several nodes share. It is not a general S3
// client: it keeps to the five calls of blob.Store under one key prefix of
// one bucket, and it neither creates buckets nor manages credentials, which
// come from the usual AWS environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_REGION, or a shared profile).
package s3

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"

	"warren/internal/blob"
)

// Store is a blob.Store on an S3 bucket. Its methods may be called
// concurrently.
type Store struct {
	bucket *gcblob.Bucket // already scoped to prefix
	name   string         // bucket name
	// endpoint is the server's URL without user info, "" for AWS itself.
	endpoint string
	prefix   string // "" or ends with '/'
}

var _ blob.Store = (*Store)(nil)

// Open opens the bucket that rawURL names, such as
//
//	s3://bucket?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true&prefix=warren/
//
// The host is the bucket. prefix, optional, scopes the store to the keys
// under it inside the bucket; it must be a valid key followed by '/'. Every
// other query parameter goes to gocloud.dev's s3blob URL opener, which
// spells them: endpoint, region, use_path_style (most S3-compatible servers
// need it true), disable_https, profile, hostname_immutable,
// request_checksum_calculation and response_checksum_validation
// ("when_required" for servers that reject the SDK's default checksums),
// and the rest listed on s3blob.URLOpener and gocloud.dev/aws's
// V2ConfigFromURLParams. Open does not reach the server: a wrong bucket
// or credentials show on the first call.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open s3 store: %w", err)
	}
	if u.Scheme != s3blob.Scheme || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return nil, fmt.Errorf("open s3 store: want a URL like s3://bucket?region=..., got %q", redactURL(u))
	}
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	if prefix != "" {
		if !strings.HasSuffix(prefix, "/") {
			return nil, fmt.Errorf("open s3 store: prefix %q must end with '/'", prefix)
		}
		if err := blob.ValidKey(strings.TrimSuffix(prefix, "/")); err != nil {
			return nil, fmt.Errorf("open s3 store: prefix: %w", err)
		}
	}
	s := &Store{name: u.Host, prefix: prefix}
	if ep := q.Get("endpoint"); ep != "" {
		epURL, err := url.Parse(ep)
		if err != nil {
			return nil, fmt.Errorf("open s3 store: endpoint: %w", err)
		}
		s.endpoint = redactURL(epURL)
	}
	bare := *u
	bare.RawQuery = q.Encode()
	bucket, err := (&s3blob.URLOpener{}).OpenBucketURL(ctx, &bare)
	if err != nil {
		// gocloud's message repeats the URL; it holds no secrets.
		return nil, fmt.Errorf("open s3 store: %w", err)
	}
	if prefix != "" {
		bucket = gcblob.PrefixedBucket(bucket, prefix)
	}
	s.bucket = bucket
	return s, nil
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// Put uploads data with one PUT (or, for large objects, a multipart upload
// that S3 publishes only when complete), so readers never see a part.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := blob.ValidKey(key); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	// gocloud starts the upload only on Close; fail early and surely.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	opts := &gcblob.WriterOptions{ContentType: "application/octet-stream"}
	if err := s.bucket.WriteAll(ctx, key, data, opts); err != nil {
		return fmt.Errorf("put %s: %w", key, s.mapErr(err))
	}
	return nil
}

// Get downloads the object.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := blob.ValidKey(key); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	data, err := s.bucket.ReadAll(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, s.mapErr(err))
	}
	return data, nil
}

// Stat asks for the object's attributes (a HEAD request).
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return blob.Info{}, fmt.Errorf("stat: %w", err)
	}
	attrs, err := s.bucket.Attributes(ctx, key)
	if err != nil {
		return blob.Info{}, fmt.Errorf("stat %s: %w", key, s.mapErr(err))
	}
	return blob.Info{Key: key, Size: attrs.Size, ModTime: attrs.ModTime}, nil
}

// Delete removes the object.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	// s3blob answers NotFound for a missing key (it looks first).
	if err := s.bucket.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("delete %s: %w", key, s.mapErr(err))
	}
	return nil
}

// List pages through the objects under prefix, nested keys included.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	if err := blob.ValidPrefix(prefix); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	var infos []blob.Info
	it := s.bucket.List(&gcblob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, s.mapErr(err))
		}
		if obj.IsDir {
			continue // only with a Delimiter, which List does not set
		}
		infos = append(infos, blob.Info{Key: obj.Key, Size: obj.Size, ModTime: obj.ModTime})
	}
	// S3 lists in byte order already; not every compatible server does.
	slices.SortFunc(infos, func(a, b blob.Info) int { return strings.Compare(a.Key, b.Key) })
	return infos, nil
}

// mapErr turns gocloud's NotFound into blob.ErrNotFound, keeping the
// gocloud error's text, and leaves other errors as they are.
func (s *Store) mapErr(err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("%w in %s", blob.ErrNotFound, s)
	}
	return err
}

// String names the bucket, endpoint and prefix; never credentials, which
// the store does not hold.
func (s *Store) String() string {
	var b strings.Builder
	b.WriteString("s3://" + s.name + "/" + s.prefix)
	if s.endpoint != "" {
		b.WriteString(" at " + s.endpoint)
	}
	return b.String()
}

// Close releases the bucket's connections.
func (s *Store) Close() error {
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("close %s: %w", s, err)
	}
	return nil
}
