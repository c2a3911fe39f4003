package s3

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"warren/internal/blob"
	"warren/internal/blob/blobtest"
	"warren/internal/blob/s3test"
)

// TestStore runs the shared suite against a real versitygw; each subtest
// gets a prefix of its own in the one bucket.
func TestStore(t *testing.T) {
	srv := s3test.Start(t)
	n := 0
	blobtest.Run(t, func(t *testing.T) blob.Store {
		n++
		s, err := Open(t.Context(), fmt.Sprintf("%s&prefix=suite/%d/", srv.URL, n))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestPrefix checks that a prefixed store sees only its own keys, and
// that they lie under the prefix in the bucket.
func TestPrefix(t *testing.T) {
	srv := s3test.Start(t)
	ctx := t.Context()
	whole, err := Open(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	scoped, err := Open(ctx, srv.URL+"&prefix=warren/snap/")
	if err != nil {
		t.Fatal(err)
	}
	defer scoped.Close()
	if err := scoped.Put(ctx, "a/b", []byte("in")); err != nil {
		t.Fatal(err)
	}
	if err := whole.Put(ctx, "outside", []byte("out")); err != nil {
		t.Fatal(err)
	}
	if got, err := whole.Get(ctx, "warren/snap/a/b"); err != nil || string(got) != "in" {
		t.Errorf("Get(warren/snap/a/b) in the whole bucket = %q, %v; want in", got, err)
	}
	infos, err := scoped.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != "a/b" {
		t.Errorf("scoped List = %+v, want only a/b", infos)
	}
	if _, err := scoped.Get(ctx, "outside"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("scoped Get(outside) = %v, want ErrNotFound", err)
	}
}

func TestString(t *testing.T) {
	srv := s3test.Start(t)
	s, err := Open(t.Context(), srv.URL+"&prefix=warren/")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := s.String()
	if !strings.HasPrefix(got, "s3://warren-test/warren/ at http://127.0.0.1:") {
		t.Errorf("String() = %q, want bucket, prefix and endpoint", got)
	}
	for _, kv := range srv.Env {
		_, secret, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(kv, "AWS_SECRET") && strings.Contains(got, secret) {
			t.Errorf("String() = %q shows the secret key", got)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, url := range []string{
		"file:///tmp/x",
		"s3://",
		"s3://bucket/path",
		"s3://key:secret@bucket",
		"s3://bucket?prefix=warren",
		"s3://bucket?prefix=/warren/",
		"s3://bucket?prefix=a//",
		"s3://bucket?no_such_option=1",
	} {
		if s, err := Open(t.Context(), url); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", url)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) = %v, shows the secret", url, err)
		}
	}
}
