package main

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warren/api"
	"warren/client"
	"warren/internal/wait"
)

// TestProgressQuietOffTerminal: with stderr not a terminal, the commands
// that show progress print their result alone, and nothing on stderr.
func TestProgressQuietOffTerminal(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	p := filepath.Join(t.TempDir(), "blob.bin")
	data := make([]byte, 3<<20)
	rand.Read(data)
	if code, stdout, stderr := runCLI(t, data, "files", "write", id, p); code != 0 || stdout != "" || stderr != "" {
		t.Errorf("files write: exit %d stdout %q stderr %q, want nothing", code, stdout, stderr)
	}
	if code, stdout, stderr := runCLI(t, nil, "files", "read", id, p); code != 0 || stdout != string(data) || stderr != "" {
		t.Errorf("files read: exit %d, %d bytes, stderr %q; want the file alone", code, len(stdout), stderr)
	}
	code, stdout, stderr := runCLI(t, nil, "snapshot", "--wait", id)
	snap := strings.TrimSpace(stdout)
	if code != 0 || stdout != snap+"\n" || stderr != "" {
		t.Fatalf("snapshot --wait: exit %d stdout %q stderr %q, want the ID alone", code, stdout, stderr)
	}
	if code, stdout, stderr := runCLI(t, nil, "restore", "--count", "2", snap); code != 0 || len(strings.Fields(stdout)) != 2 || stderr != "" {
		t.Errorf("restore --count 2: exit %d stdout %q stderr %q, want two IDs alone", code, stdout, stderr)
	}
}

// runForced runs the command line with progress shown on stderr as if it
// were a terminal.
func runForced(t *testing.T, stdin io.Reader, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := &cli{stdin: stdin, stdout: &out, stderr: &errOut, forceProgress: true}
	code = c.run(t.Context(), args)
	return code, out.String(), errOut.String()
}

// TestProgressFiles: on a terminal, a large file's transfer shows a bar
// on stderr, and stdout is unchanged; --no-progress hides it.
func TestProgressFiles(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	dir := t.TempDir()
	local, remote := filepath.Join(dir, "local.bin"), filepath.Join(dir, "remote.bin")
	data := make([]byte, 3<<20)
	rand.Read(data)
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(local)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code, stdout, stderr := runForced(t, f, "files", "write", id, remote)
	if code != 0 || stdout != "" || !strings.HasPrefix(stderr, "\rfiles write  ") || !strings.HasSuffix(stderr, "\n") ||
		!strings.Contains(lastLine(stderr), "3.0 MiB / 3.0 MiB  100% [####################]") {
		t.Errorf("files write: exit %d stdout %q stderr %q, want a bar of the file's size on stderr alone", code, stdout, stderr)
	}
	if got, err := os.ReadFile(remote); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the sandbox's file: %d bytes, %v; want the local file's", len(got), err)
	}

	code, stdout, stderr = runForced(t, nil, "files", "read", id, remote)
	if code != 0 || stdout != string(data) || !strings.Contains(lastLine(stderr), "files read  3.0 MiB / 3.0 MiB  100%") {
		t.Errorf("files read: exit %d, %d bytes (equal %v), stderr %q; want the file on stdout, a bar on stderr",
			code, len(stdout), stdout == string(data), stderr)
	}
	if code, stdout, stderr := runForced(t, bytes.NewReader(data), "files", "write", "--no-progress", id, remote); code != 0 || stdout != "" || stderr != "" {
		t.Errorf("files write --no-progress: exit %d stdout %q stderr %q, want nothing", code, stdout, stderr)
	}
	if code, stdout, stderr := runForced(t, nil, "files", "read", "--no-progress", id, remote); code != 0 || stdout != string(data) || stderr != "" {
		t.Errorf("files read --no-progress: exit %d, %d bytes, stderr %q; want the file alone", code, len(stdout), stderr)
	}
}

// doneOf is how much p counts as done.
func doneOf(p *progress) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// statusOf is p's status.
func statusOf(p *progress) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// TestProgressEvents: the events stream counts a restore's sandboxes and a
// fork's children, and says when a snapshot is pending.
func TestProgressEvents(t *testing.T) {
	w := newWarren(t)
	id := w.sandbox(api.CreateSandboxRequest{}).ID
	cl := client.New(w.url, w.key)
	ctx := t.Context()
	c := newClock()

	p := newProgress(io.Discard, c.now, 80, "snapshot", -1, false)
	stop := watchSnapshot(ctx, cl, p, id)
	sn, err := cl.Snapshot(ctx, id, api.CreateSnapshotRequest{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the snapshot pending", func() bool { return strings.HasPrefix(statusOf(p), sn.ID+" pending") })
	stop()

	p = newProgress(io.Discard, c.now, 80, "restore", 3, false)
	stop = countStarted(ctx, cl, p, sn.ID)
	if _, err := cl.Restore(ctx, sn.ID, api.RestoreRequest{Count: 3}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "3 sandboxes counted", func() bool { return doneOf(p) == 3 })
	stop()

	p = newProgress(io.Discard, c.now, 80, "fork", 2, false)
	stop = countForked(ctx, cl, p, id)
	res, err := cl.Fork(ctx, id, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "2 children counted", func() bool { return doneOf(p) == 2 })
	stop()
	if got := statusOf(p); got != "snapshot "+res.Snapshot.ID {
		t.Errorf("fork's status %q, want its snapshot %s", got, res.Snapshot.ID)
	}
	if got := doneOf(p); got != 2 {
		t.Errorf("fork counted %d, want its 2 children alone", got)
	}
}
