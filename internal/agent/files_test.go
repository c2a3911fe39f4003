//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"warren/internal/agent"
	filesystempb "warren/internal/agent/pb/filesystem"
	"warren/internal/wait"
)

// randReader is a deterministic stream of n pseudo-random bytes.
type randReader struct {
	rng *rand.ChaCha8
	n   int64
}

func (r *randReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	n, _ := r.rng.Read(p)
	r.n -= int64(n)
	return n, nil
}

// heapWatch samples the heap in use until stopped and reports the peak.
func heapWatch() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

func TestFileRoundTripLarge(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const size = 200 << 20
	target := filepath.Join(t.TempDir(), "sub", "dir", "big.bin")

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	stop := heapWatch()

	sum := sha256.New()
	body := io.TeeReader(&randReader{rng: rand.NewChaCha8([32]byte{1}), n: size}, sum)
	entry, err := conn.WriteFile(ctx, target, 0o600, "", body)
	if err != nil {
		t.Fatal(err)
	}
	if entry.GetSize() != size || entry.GetPath() != target || entry.GetPermissions() != "-rw-------" || entry.GetType() != filesystempb.FileType_FILE_TYPE_FILE {
		t.Errorf("entry %v", entry)
	}
	rc, n, err := conn.ReadFile(ctx, target, "")
	if err != nil {
		t.Fatal(err)
	}
	back := sha256.New()
	copied, err := io.Copy(back, rc)
	rc.Close()
	peak := stop()
	if err != nil || n != size || copied != size {
		t.Fatalf("read back: size %d, copied %d, err %v", n, copied, err)
	}
	if !bytes.Equal(sum.Sum(nil), back.Sum(nil)) {
		t.Error("content differs after round trip")
	}
	if grew := int64(peak) - int64(base); grew > 48<<20 {
		t.Errorf("heap grew by %d MiB moving 200 MiB: not streamed", grew>>20)
	}
	t.Logf("heap peak %d MiB over a base of %d MiB", peak>>20, base>>20)
}

// failingReader fails after n bytes, as an upload cut short does.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("connection lost")
	}
	n := min(len(p), r.n)
	clear(p[:n])
	r.n -= n
	return n, nil
}

func TestFileWriteAtomicAndErrors(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	target := filepath.Join(dir, "f.txt")
	if _, err := conn.WriteFile(ctx, target, 0o644, "", strings.NewReader("old content")); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.WriteFile(ctx, target, 0o644, "", &failingReader{n: 1 << 20}); err == nil {
		t.Fatal("a failed upload succeeded")
	}
	if data, _ := os.ReadFile(target); string(data) != "old content" {
		t.Errorf("after a failed upload the file holds %q", data)
	}
	wait.For(t, 5*time.Second, "the temporary file to be removed", func() bool {
		names, _ := os.ReadDir(dir)
		return len(names) == 1
	})
	rc, n, err := conn.ReadFile(ctx, target, "")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if string(data) != "old content" || n != int64(len(data)) {
		t.Errorf("read %q size %d", data, n)
	}
	// An empty body makes an empty file.
	if e, err := conn.WriteFile(ctx, filepath.Join(dir, "empty"), 0o644, "", nil); err != nil || e.GetSize() != 0 {
		t.Errorf("empty upload: %v %v", e, err)
	}

	for _, tt := range []struct {
		name string
		path string
		code connect.Code
		msg  string
	}{
		{"missing", filepath.Join(dir, "nope"), connect.CodeNotFound, ""},
		{"directory", dir, connect.CodeInvalidArgument, "not a regular file"},
		{"escape absolute", "/../etc/passwd", connect.CodeInvalidArgument, "path escapes the sandbox root"},
		{"escape relative", "../../etc/passwd", connect.CodeInvalidArgument, "path escapes the sandbox root"},
		{"nul", "/etc/pass\x00wd", connect.CodeInvalidArgument, "NUL"},
		{"empty", "", connect.CodeInvalidArgument, ""},
	} {
		t.Run("read "+tt.name, func(t *testing.T) {
			_, _, err := conn.ReadFile(ctx, tt.path, "")
			wantCode(t, err, tt.code)
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q, want it to say %q", err, tt.msg)
			}
		})
	}
	_, err = conn.WriteFile(ctx, dir, 0o644, "", strings.NewReader("x"))
	wantCode(t, err, connect.CodeFailedPrecondition)
	_, err = conn.WriteFile(ctx, "/../../tmp/x", 0o644, "", strings.NewReader("x"))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = conn.WriteFile(ctx, filepath.Join(dir, "x"), 0o644, "no-such-user", strings.NewReader("x"))
	wantCode(t, err, connect.CodeInvalidArgument)
}

// nobodyDir is a new directory that user nobody owns, on a path nobody
// may walk.
func nobodyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestFileOwnerAndMode(t *testing.T) {
	needRoot(t)
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	dir := nobodyDir(t)
	target := filepath.Join(dir, "new", "owned.txt")
	e, err := conn.WriteFile(ctx, target, 0o640|os.ModeSetgid, "nobody", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if e.GetOwner() != "nobody" || e.GetMode() != 0o2640 || e.GetPermissions() != "-rw-r-S---" {
		t.Errorf("entry %v", e)
	}
	st, err := conn.Filesystem.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: filepath.Join(dir, "new")}))
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Msg.GetEntry(); p.GetOwner() != "nobody" || p.GetPermissions() != "drwxr-xr-x" {
		t.Errorf("created parent %v", p)
	}
}

// TestFilesAsUser is the regression test of issue 13, item 8: with
// user=user the files API read /etc/shadow, and through a symlink that
// user made (~/cfg -> /etc/profile.d) wrote a script a root login shell
// then ran. A call naming a user now has that user's rights, through any
// symlink; root's calls keep root's.
func TestFilesAsUser(t *testing.T) {
	needRoot(t)
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	home := nobodyDir(t)
	rootOnly := filepath.Join(filepath.Dir(home), "root-only")
	if err := os.Mkdir(rootOnly, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(rootOnly, "shadow")
	if err := os.WriteFile(secret, []byte("root:$6$secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rootOnly, filepath.Join(home, "cfg")); err != nil {
		t.Fatal(err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s as nobody: %v, want permission denied", what, err)
		}
	}

	_, _, err := conn.ReadFile(ctx, secret, "nobody")
	denied("read a root-only file", err)
	_, err = conn.WriteFile(ctx, filepath.Join(home, "cfg", "evil.sh"), 0o644, "nobody", strings.NewReader("echo owned"))
	denied("write through a symlink to a root-owned directory", err)
	_, err = conn.WriteFile(ctx, secret, 0o644, "nobody", strings.NewReader("replaced"))
	denied("replace a root-only file", err)
	_, err = conn.Filesystem.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: filepath.Join(home, "cfg", "sub"), User: "nobody"}))
	denied("make a directory in a root-owned directory", err)
	if entries, _ := os.ReadDir(rootOnly); len(entries) != 1 {
		t.Errorf("the root-owned directory holds %d entries, want only the secret", len(entries))
	}

	// Its own files it reads and writes; root reads and writes anything.
	e, err := conn.WriteFile(ctx, filepath.Join(home, "cfg-not", "mine.txt"), 0o600, "nobody", strings.NewReader("ok"))
	if err != nil || e.GetOwner() != "nobody" {
		t.Errorf("write in its own directory as nobody: %v %v", e, err)
	}
	rc, _, err := conn.ReadFile(ctx, filepath.Join(home, "cfg-not", "mine.txt"), "nobody")
	if err != nil {
		t.Fatalf("read its own file as nobody: %v", err)
	}
	rc.Close()
	rc, _, err = conn.ReadFile(ctx, secret, "root")
	if err != nil {
		t.Fatalf("read as root: %v", err)
	}
	rc.Close()
	if _, err := conn.WriteFile(ctx, filepath.Join(home, "cfg", "root.sh"), 0o644, "", strings.NewReader("x")); err != nil {
		t.Errorf("write through the symlink as root: %v", err)
	}
}

func TestFilesystem(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	fsc := conn.Filesystem
	dir := t.TempDir()

	// MakeDir: -p, exact mode, AlreadyExists.
	deep := filepath.Join(dir, "a", "b", "c")
	mk, err := fsc.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: deep, Mode: 0o750}))
	if err != nil {
		t.Fatal(err)
	}
	if e := mk.Msg.GetEntry(); e.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || e.GetPermissions() != "drwxr-x---" || e.GetName() != "c" || e.GetPath() != deep {
		t.Errorf("made %v", e)
	}
	for _, p := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o750 {
			t.Errorf("parent %s: %v %v", p, fi.Mode(), err)
		}
	}
	_, err = fsc.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: deep}))
	wantCode(t, err, connect.CodeAlreadyExists)
	if os.Geteuid() == 0 {
		owned := filepath.Join(nobodyDir(t), "owned")
		mk, err := fsc.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: owned, User: "nobody"}))
		if err != nil || mk.Msg.GetEntry().GetOwner() != "nobody" || mk.Msg.GetEntry().GetPermissions() != "drwxr-xr-x" {
			t.Errorf("owned dir: %v %v", mk, err)
		}
	}

	// A file, a symlink, then Stat and ListDir.
	file := filepath.Join(dir, "a", "file.txt")
	if err := os.WriteFile(file, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "a", "link")
	if err := os.Symlink("file.txt", link); err != nil {
		t.Fatal(err)
	}
	st, err := fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: link}))
	if err != nil {
		t.Fatal(err)
	}
	if e := st.Msg.GetEntry(); e.GetType() != filesystempb.FileType_FILE_TYPE_SYMLINK || e.GetSymlinkTarget() != "file.txt" || e.GetPermissions()[0] != 'l' {
		t.Errorf("symlink %v", e)
	}
	st, err = fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: file}))
	if err != nil {
		t.Fatal(err)
	}
	e := st.Msg.GetEntry()
	if e.GetSize() != 5 || e.GetMode() != 0o644 || e.GetPermissions() != "-rw-r--r--" || e.GetModifiedTime().AsTime().IsZero() || e.GetOwner() == "" || e.GetGroup() == "" {
		t.Errorf("file %v", e)
	}
	names := func(depth uint32) []string {
		resp, err := fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: filepath.Join(dir, "a"), Depth: depth}))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range resp.Msg.GetEntries() {
			rel, _ := filepath.Rel(filepath.Join(dir, "a"), e.GetPath())
			out = append(out, rel)
		}
		return out
	}
	if got := strings.Join(names(1), " "); got != "b file.txt link" {
		t.Errorf("depth 1: %s", got)
	}
	if got := strings.Join(names(0), " "); got != "b file.txt link" {
		t.Errorf("depth 0: %s", got)
	}
	if got := strings.Join(names(3), " "); got != "b b/c file.txt link" {
		t.Errorf("depth 3: %s", got)
	}
	_, err = fsc.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: file}))
	wantCode(t, err, connect.CodeInvalidArgument)

	// Move.
	moved := filepath.Join(dir, "moved.txt")
	mv, err := fsc.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: file, Destination: moved}))
	if err != nil || mv.Msg.GetEntry().GetPath() != moved || mv.Msg.GetEntry().GetSize() != 5 {
		t.Fatalf("move: %v %v", mv, err)
	}
	_, err = fsc.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: file, Destination: moved}))
	wantCode(t, err, connect.CodeNotFound)

	// Remove: refusal, recursive, missing.
	_, err = fsc.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: filepath.Join(dir, "a"), Recursive: ptr(false)}))
	wantCode(t, err, connect.CodeFailedPrecondition)
	if _, err := fsc.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: moved, Recursive: ptr(false)})); err != nil {
		t.Error(err)
	}
	if _, err := fsc.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: filepath.Join(dir, "a")})); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("a still there: %v", err)
	}
	_, err = fsc.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: filepath.Join(dir, "a")}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: filepath.Join(dir, "a")}))
	wantCode(t, err, connect.CodeNotFound)

	// Paths that climb above "/" and NUL bytes are refused, never cleaned.
	for _, p := range []string{"/../etc", "/a/../../etc", "../../../x", "a\x00b", ""} {
		_, err = fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: p}))
		wantCode(t, err, connect.CodeInvalidArgument)
		_, err = fsc.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: p}))
		wantCode(t, err, connect.CodeInvalidArgument)
	}
	_, err = fsc.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/"}))
	wantCode(t, err, connect.CodeInvalidArgument)
	// A relative path starts at root's home.
	if home, err := os.UserHomeDir(); err == nil && os.Geteuid() == 0 {
		st, err := fsc.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "."}))
		if err != nil || st.Msg.GetEntry().GetPath() != home {
			t.Errorf("stat . = %v %v, want %s", st, err, home)
		}
	}
}
