//go:build linux

package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"warren/api"
)

// TestListFilesPages: a directory of 2,500 files and a subtree, listed in
// pages through the API, answers each entry once and in order; the page
// size is capped; a token is for its own directory and depth only.
func TestListFilesPages(t *testing.T) {
	e, box := newAgentEnv(t, Options{})
	dir := t.TempDir()
	var want []string
	for i := range 2500 {
		name := fmt.Sprintf("f%04d", i)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, filepath.Join(dir, name))
		if i == 1000 {
			sub := filepath.Join(dir, name+".d")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(sub, "inner"), nil, 0o644)
		}
	}
	want = append(want[:1001], append([]string{filepath.Join(dir, "f1000.d"), filepath.Join(dir, "f1000.d", "inner")}, want[1001:]...)...)
	list := func(limit int) []string {
		var got []string
		token := ""
		for {
			q := url.Values{"path": {dir}, "depth": {"2"}}
			if limit > 0 {
				q.Set("limit", fmt.Sprint(limit))
			}
			if token != "" {
				q.Set("page_token", token)
			}
			var page api.FileList
			e.call("GET", box+"/files/list?"+q.Encode(), e.keyA, nil, http.StatusOK, &page)
			max := limit
			if max == 0 {
				max = api.DefaultFileListLimit
			}
			if len(page.Entries) > max {
				t.Fatalf("page of %d entries, limit %d", len(page.Entries), max)
			}
			for _, fi := range page.Entries {
				got = append(got, fi.Path)
			}
			if page.NextPageToken == "" {
				return got
			}
			token = page.NextPageToken
		}
	}
	for _, limit := range []int{0, 999, 10000} {
		if got := list(limit); !slices.Equal(got, want) {
			t.Errorf("limit %d: %d entries, want %d (first differs at %d)", limit, len(got), len(want),
				slices.IndexFunc(got, func(p string) bool { return !slices.Contains(want, p) }))
		}
	}
	apiError(t, e.do("GET", box+"/files/list?"+url.Values{"path": {dir}, "limit": {"10001"}}.Encode(), e.keyA, nil), http.StatusBadRequest, api.CodeBadRequest)
	var first api.FileList
	e.call("GET", box+"/files/list?"+url.Values{"path": {dir}, "limit": {"10"}}.Encode(), e.keyA, nil, http.StatusOK, &first)
	for _, q := range []url.Values{
		{"path": {filepath.Dir(dir)}, "page_token": {first.NextPageToken}},
		{"path": {dir}, "depth": {"2"}, "page_token": {first.NextPageToken}},
	} {
		apiError(t, e.do("GET", box+"/files/list?"+q.Encode(), e.keyA, nil), http.StatusBadRequest, api.CodeBadRequest)
	}
}

// TestListingsWaitTheirTurn: with every listing slot of the node taken, a
// listing waits (here until its caller gives up) and is served once a slot
// is free.
func TestListingsWaitTheirTurn(t *testing.T) {
	e, box := newAgentEnv(t, Options{Limits: Limits{ListingsOnNode: 2}})
	path := box + "/files/list?path=" + url.QueryEscape(t.TempDir())
	e.srv.listings <- struct{}{}
	e.srv.listings <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.keyA)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("listing served with every slot taken: status %d", resp.StatusCode)
	}
	<-e.srv.listings
	e.call("GET", path, e.keyA, nil, http.StatusOK, nil)
	<-e.srv.listings
	if n := len(e.srv.listings); n != 0 {
		t.Errorf("%d listing slots still held after the listings ended", n)
	}
}
