//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"

	"warren/internal/agent"
	"warren/internal/agent/agenttest"
	filesystempb "warren/internal/agent/pb/filesystem"
	"warren/internal/wait"
)

// inotifyFDs counts the process's open inotify instances: the agent of
// these tests serves in the test's process.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// basicUser is the header with which an E2B SDK names the user of a call.
func basicUser(user string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	return h
}

type watchEvent struct {
	name string
	op   filesystempb.EventType
}

func TestWatchDir(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	dir := t.TempDir()
	before := inotifyFDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := conn.Filesystem.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first message %v, err %v: want start", stream.Msg(), stream.Err())
	}
	// expect reads events until want, failing if the stream ends first.
	expect := func(want watchEvent) *filesystempb.FilesystemEvent {
		t.Helper()
		for stream.Receive() {
			if ev := stream.Msg().GetFilesystem(); ev != nil && ev.GetName() == want.name && ev.GetType() == want.op {
				return ev
			}
		}
		t.Fatalf("stream ended (%v) before %v", stream.Err(), want)
		return nil
	}
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(a, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ev := expect(watchEvent{"a", filesystempb.EventType_EVENT_TYPE_CREATE})
	if e := ev.GetEntry(); e.GetPath() != a || e.GetType() != filesystempb.FileType_FILE_TYPE_FILE {
		t.Errorf("create a: entry %v, want the file %s", e, a)
	}
	if err := os.WriteFile(a, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(watchEvent{"a", filesystempb.EventType_EVENT_TYPE_WRITE})
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	expect(watchEvent{"a", filesystempb.EventType_EVENT_TYPE_RENAME})
	expect(watchEvent{"b", filesystempb.EventType_EVENT_TYPE_CREATE})
	if err := os.Chmod(b, 0o600); err != nil {
		t.Fatal(err)
	}
	expect(watchEvent{"b", filesystempb.EventType_EVENT_TYPE_CHMOD})
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	if ev := expect(watchEvent{"b", filesystempb.EventType_EVENT_TYPE_REMOVE}); ev.Entry != nil {
		t.Errorf("remove b: entry %v, want none", ev.GetEntry())
	}
	// A subdirectory made after the watch began is watched too, once its
	// create event is out; so is one below it.
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	expect(watchEvent{"sub", filesystempb.EventType_EVENT_TYPE_CREATE})
	if err := os.Mkdir(filepath.Join(dir, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	expect(watchEvent{"sub/deeper", filesystempb.EventType_EVENT_TYPE_CREATE})
	if err := os.WriteFile(filepath.Join(dir, "sub", "deeper", "c"), []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect(watchEvent{"sub/deeper/c", filesystempb.EventType_EVENT_TYPE_CREATE})
	expect(watchEvent{"sub/deeper/c", filesystempb.EventType_EVENT_TYPE_WRITE})
	// Moved within the tree, a subdirectory's events name where it is now.
	if err := os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	expect(watchEvent{"moved", filesystempb.EventType_EVENT_TYPE_CREATE})
	if err := os.Remove(filepath.Join(dir, "moved", "deeper", "c")); err != nil {
		t.Fatal(err)
	}
	expect(watchEvent{"moved/deeper/c", filesystempb.EventType_EVENT_TYPE_REMOVE})

	if got := inotifyFDs(t); got != before+1 {
		t.Errorf("inotify instances while watching: %d, want %d", got, before+1)
	}
	cancel()
	wait.For(t, 10*time.Second, "the stream's inotify instance to be closed", func() bool { return inotifyFDs(t) == before })
}

func TestWatchDirEndsWithDirectory(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{KeepAlive: 20 * time.Millisecond})
	dir := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := conn.Filesystem.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("first message %v, err %v: want start", stream.Msg(), stream.Err())
	}
	if !stream.Receive() || stream.Msg().GetKeepalive() == nil {
		t.Fatalf("quiet stream's message %v, err %v: want a keep-alive", stream.Msg(), stream.Err())
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	var got []watchEvent
	for stream.Receive() {
		if ev := stream.Msg().GetFilesystem(); ev != nil {
			got = append(got, watchEvent{ev.GetName(), ev.GetType()})
		}
	}
	if stream.Err() != nil || len(got) != 1 || got[0] != (watchEvent{".", filesystempb.EventType_EVENT_TYPE_REMOVE}) {
		t.Errorf("events %v, end %v: want one remove of \".\" and a clean end", got, stream.Err())
	}
}

func TestWatchErrors(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		code connect.Code
	}{
		{filepath.Join(dir, "missing"), connect.CodeNotFound},
		{file, connect.CodeInvalidArgument},
		{"../../../../../../../../..", connect.CodeInvalidArgument},
	} {
		stream, err := conn.Filesystem.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: tc.path}))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
		}
		wantCode(t, err, tc.code)
		_, err = conn.Filesystem.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: tc.path}))
		wantCode(t, err, tc.code)
	}
	_, err := conn.Filesystem.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: "wnone"}))
	wantCode(t, err, connect.CodeNotFound)
	_, err = conn.Filesystem.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: "wnone"}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestPollingWatcher(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	fsc := conn.Filesystem
	dir := t.TempDir()
	before := inotifyFDs(t)
	cw, err := fsc.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: dir, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	var got []watchEvent
	wait.For(t, 10*time.Second, "the events of x", func() bool {
		resp, err := fsc.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Msg.GetEvents() {
			got = append(got, watchEvent{ev.GetName(), ev.GetType()})
		}
		return len(got) >= 3
	})
	want := []watchEvent{
		{"x", filesystempb.EventType_EVENT_TYPE_CREATE},
		{"x", filesystempb.EventType_EVENT_TYPE_WRITE},
		{"x", filesystempb.EventType_EVENT_TYPE_REMOVE},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("events %v, want %v", got, want)
	}
	if _, err := fsc.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	if got := inotifyFDs(t); got != before {
		t.Errorf("inotify instances after RemoveWatcher: %d, want %d", got, before)
	}
	_, err = fsc.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestBasicAuthUser(t *testing.T) {
	conn, _ := startAgent(t, agent.Options{})
	ctx := context.Background()
	fsc := conn.Filesystem
	// bin's home is /bin: "sh" is /bin/sh for bin, and not in root's home.
	req := connect.NewRequest(&filesystempb.StatRequest{Path: "sh"})
	for k, v := range basicUser("bin") {
		req.Header()[k] = v
	}
	st, err := fsc.Stat(ctx, req)
	if err != nil {
		t.Fatalf("stat sh as bin: %v", err)
	}
	if got := st.Msg.GetEntry().GetPath(); got != "/bin/sh" {
		t.Errorf("sh as bin is %s, want /bin/sh", got)
	}
	req = connect.NewRequest(&filesystempb.StatRequest{Path: "sh"})
	for k, v := range basicUser("no-such-user") {
		req.Header()[k] = v
	}
	_, err = fsc.Stat(ctx, req)
	wantCode(t, err, connect.CodeUnauthenticated)

	if os.Geteuid() != 0 {
		return
	}
	owned := filepath.Join(nobodyDir(t), "owned")
	mreq := connect.NewRequest(&filesystempb.MakeDirRequest{Path: owned})
	for k, v := range basicUser("nobody") {
		mreq.Header()[k] = v
	}
	mk, err := fsc.MakeDir(ctx, mreq)
	if err != nil || mk.Msg.GetEntry().GetOwner() != "nobody" {
		t.Errorf("MakeDir as nobody: %v %v, want a directory nobody owns", mk, err)
	}
}

// rawCall posts body to the agent's procedure with the content type and
// returns the answer's body.
func rawCall(t *testing.T, sock, procedure, contentType string, body []byte) []byte {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://agent"+procedure, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s %s %v", procedure, resp.Status, out, err)
	}
	return out
}

// TestEntryWireForm pins what E2B's SDKs read: a symlink's type is 3 in
// the binary form, FILE_TYPE_SYMLINK in JSON, and metadata is field 11, a
// JSON object of the file's user extended attributes.
func TestEntryWireForm(t *testing.T) {
	sock, _ := agenttest.Listen(t, agent.Options{})
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink("target", link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	body := protowire.AppendTag(nil, 1, protowire.BytesType)
	body = protowire.AppendString(body, link)
	out := rawCall(t, sock, "/filesystem.Filesystem/Stat", "application/proto", body)
	entry := field(t, out, 1)
	if typ := field(t, entry, 2); len(typ) != 1 || typ[0] != 3 {
		t.Errorf("symlink type on the wire %v, want 3", typ)
	}

	js := rawCall(t, sock, "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"`+link+`"}`))
	if !strings.Contains(string(js), `"type":"FILE_TYPE_SYMLINK"`) {
		t.Errorf("JSON answer %s: want FILE_TYPE_SYMLINK", js)
	}

	if err := unix.Setxattr(file, "user.owner-team", []byte("infra"), 0); err != nil {
		t.Skipf("no user extended attributes in %s: %v", dir, err)
	}
	js = rawCall(t, sock, "/filesystem.Filesystem/Stat", "application/json", []byte(`{"path":"`+file+`"}`))
	var got struct {
		Entry struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Entry.Metadata) != 1 || got.Entry.Metadata["owner-team"] != "infra" {
		t.Errorf("metadata %v (answer %s), want owner-team: infra", got.Entry.Metadata, js)
	}
}

// field is the value of the first field num of the message b, as bytes
// (a varint's one byte, for small ones).
func field(t *testing.T, b []byte, num protowire.Number) []byte {
	t.Helper()
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(l))
		}
		b = b[l:]
		var v []byte
		switch typ {
		case protowire.VarintType:
			x, l := protowire.ConsumeVarint(b)
			v, b = protowire.AppendVarint(nil, x), b[l:]
		case protowire.BytesType:
			x, l := protowire.ConsumeBytes(b)
			v, b = x, b[l:]
		default:
			l := protowire.ConsumeFieldValue(n, typ, b)
			b = b[l:]
		}
		if n == num {
			return v
		}
	}
	t.Fatalf("no field %d", num)
	return nil
}
