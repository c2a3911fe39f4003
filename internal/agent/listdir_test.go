//go:build linux

package agent_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"warren/internal/agent"
	filesystempb "warren/internal/agent/pb/filesystem"
)

// TestListDirPages: a listing read limit entries at a time gives the same
// entries, in the same order, as one read whole; each page resumes after
// the last path of the one before, also when that path was removed and
// when entries were added before and after it meanwhile.
func TestListDirPages(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	fsc := conn.Filesystem
	ctx := t.Context()
	dir := t.TempDir()
	for _, p := range []string{"a/x/1", "a/x/2", "a/y", "b", "c/z/deep/er", "d"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/f", "c/g", "e"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list := func(depth, limit uint32, after string) ([]string, bool) {
		t.Helper()
		resp, err := fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: dir, Depth: depth, Limit: limit, After: after}))
		if err != nil {
			t.Fatalf("ListDir(depth %d, limit %d, after %q): %v", depth, limit, after, err)
		}
		var out []string
		for _, e := range resp.Msg.GetEntries() {
			out = append(out, e.GetPath())
		}
		return out, resp.Msg.GetMore()
	}
	rel := func(paths []string) string {
		var out []string
		for _, p := range paths {
			out = append(out, strings.TrimPrefix(p, dir+"/"))
		}
		return strings.Join(out, " ")
	}
	for _, depth := range []uint32{1, 2, 4} {
		whole, more := list(depth, 0, "")
		if more {
			t.Fatalf("depth %d: a whole listing says more", depth)
		}
		for _, limit := range []uint32{1, 2, 3, 100} {
			var paged []string
			after := ""
			for range 100 {
				page, more := list(depth, limit, after)
				if len(page) > int(limit) || (more && len(page) != int(limit)) {
					t.Fatalf("depth %d limit %d: page of %d, more %v", depth, limit, len(page), more)
				}
				paged = append(paged, page...)
				if !more {
					break
				}
				after = page[len(page)-1]
			}
			if !slices.Equal(paged, whole) {
				t.Errorf("depth %d limit %d: pages %s\nwant %s", depth, limit, rel(paged), rel(whole))
			}
		}
	}
	if got, want := func() string { p, _ := list(4, 0, ""); return rel(p) }(),
		"a a/f a/x a/x/1 a/x/2 a/y b c c/g c/z c/z/deep c/z/deep/er d e"; got != want {
		t.Errorf("depth 4: %s\nwant %s", got, want)
	}

	// Between pages: the page's last entry goes, an entry before it and
	// one after it come.
	first, _ := list(4, 4, "") // a a/f a/x a/x/1
	if err := os.Remove(filepath.Join(dir, "a/x/1")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a/0", "a/x/0", "a/x/3"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	next, _ := list(4, 3, first[len(first)-1])
	if got := rel(next); got != "a/x/2 a/x/3 a/y" {
		t.Errorf("page after %s, changed since: %s, want a/x/2 a/x/3 a/y", rel(first), got)
	}

	_, err := fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: filepath.Join(dir, "a"), After: filepath.Join(dir, "b")}))
	wantCode(t, err, connect.CodeInvalidArgument)
}
