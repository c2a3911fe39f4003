package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// errPlainHTTP is what the transport answers to a plain HTTP request that
// Options.Insecure did not allow.
var errPlainHTTP = errors.New("plain HTTP not allowed")

// httpsOnly refuses plain HTTP requests: go-containerregistry speaks HTTP
// on its own to loopback and private (RFC 1918) registries, and follows
// redirects to any scheme.
type httpsOnly struct{ base http.RoundTripper }

func (t httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), errPlainHTTP)
	}
	return t.base.RoundTrip(req)
}

// openRemote resolves a registry reference, reads its manifest (the
// platform's, from an index) and its config.
func openRemote(ctx context.Context, src string, want v1.Platform, opts Options) (*Image, error) {
	var nameOpts []name.Option
	if opts.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	ref, err := name.ParseReference(src, nameOpts...)
	if err != nil {
		return nil, userError(ErrImage, err, "image %q: not a path that exists nor an image reference", src)
	}
	var tr http.RoundTripper = remote.DefaultTransport
	if opts.Dial != nil {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		t.DialContext, t.Proxy = opts.Dial, nil
		tr = t
	}
	if !opts.Insecure {
		tr = httpsOnly{base: tr}
	}
	var auth authn.Authenticator = authn.Anonymous
	if opts.Username != "" || opts.Password != "" {
		auth = &authn.Basic{Username: opts.Username, Password: opts.Password}
	}
	ropts := []remote.Option{remote.WithTransport(tr), remote.WithAuth(auth), remote.WithPlatform(want)}

	desc, err := remote.Get(ref, append(ropts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, registryError(ctx, src, err)
	}
	// Resolve indexes here, as for archives, rather than with
	// go-containerregistry's platform match: one rule for every source.
	for depth := 0; desc.MediaType.IsIndex(); depth++ {
		if depth == maxIndexDepth {
			return nil, userError(ErrImage, nil, "image %q: indexes nested more than %d deep", src, maxIndexDepth)
		}
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, registryError(ctx, src, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, registryError(ctx, src, err)
		}
		d, err := pickManifest(src, im.Manifests, want)
		if err != nil {
			return nil, err
		}
		child := ref.Context().Digest(d.Digest.String())
		if desc, err = remote.Get(child, append(ropts, remote.WithContext(ctx))...); err != nil {
			return nil, registryError(ctx, src, err)
		}
	}
	img, err := desc.Image()
	if err != nil {
		return nil, registryError(ctx, src, err)
	}
	// Read the config now, under Open's ctx, as Open promises.
	if _, err := img.RawConfigFile(); err != nil {
		return nil, registryError(ctx, src, err)
	}
	repo := ref.Context()
	return &Image{
		img:  img,
		size: manifestSize(img),
		layers: func(ctx context.Context) ([]v1.Layer, error) {
			m, err := img.Manifest()
			if err != nil {
				return nil, err
			}
			p, err := remote.NewPuller(ropts...)
			if err != nil {
				return nil, err
			}
			layers := make([]v1.Layer, len(m.Layers))
			for i, d := range m.Layers {
				if layers[i], err = p.Layer(ctx, repo.Digest(d.Digest.String())); err != nil {
					return nil, registryError(ctx, src, err)
				}
			}
			return layers, nil
		},
	}, nil
}

// registryError turns an error of go-containerregistry into one safe to
// show: the registry's verdict, never its body nor the network's details.
func registryError(ctx context.Context, src string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("image %q: %w", src, ctx.Err())
	}
	if errors.Is(err, errPlainHTTP) {
		return userError(ErrNetwork, err, "image %q: the registry needs plain HTTP, which is not allowed (Options.Insecure)", src)
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		code := terr.StatusCode
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				code = http.StatusNotFound
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				code = http.StatusUnauthorized
			}
		}
		switch code {
		case http.StatusNotFound:
			return userError(ErrNotFound, err, "image %q: %v", src, ErrNotFound)
		case http.StatusUnauthorized, http.StatusForbidden:
			return userError(ErrDenied, err, "image %q: %v (credentials missing or wrong)", src, ErrDenied)
		case http.StatusTooManyRequests:
			return userError(ErrDenied, err, "image %q: the registry is rate limiting (429)", src)
		}
		return userError(ErrNetwork, err, "image %q: the registry answered %d %s", src, code, http.StatusText(code))
	}
	if errors.Is(err, remote.ErrSchema1) {
		return userError(ErrImage, err, "image %q: schema 1 manifests are not supported", src)
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return userError(ErrNetwork, err, "image %q: %v", src, ErrNetwork)
	}
	return userError(ErrImage, err, "image %q: the registry's answer is not a usable image", src)
}
