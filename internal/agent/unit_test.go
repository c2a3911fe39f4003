package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	processpb "warren/internal/agent/pb/process"
)

func TestResolvePath(t *testing.T) {
	for _, tt := range []struct {
		in, home, want string
		escapes        bool
	}{
		{in: "/etc/passwd", home: "/root", want: "/etc/passwd"},
		{in: "a/b", home: "/root", want: "/root/a/b"},
		{in: ".", home: "/root", want: "/root"},
		{in: "..", home: "/root", want: "/"},
		{in: "/a/../b//c/.", home: "/", want: "/b/c"},
		{in: "x", home: "", want: "/x"},
		{in: "/../etc/x", escapes: true},
		{in: "/a/../../etc", escapes: true},
		{in: "../../x", home: "/root", escapes: true},
		{in: "../x", home: "/", escapes: true},
	} {
		got, err := resolvePath(tt.in, tt.home)
		switch {
		case tt.escapes:
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !errors.Is(err, errPathEscapes) {
				t.Errorf("resolvePath(%q, %q) = %q, %v; want it to escape", tt.in, tt.home, got, err)
			}
		case err != nil || got != tt.want:
			t.Errorf("resolvePath(%q, %q) = %q, %v; want %q", tt.in, tt.home, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "a\x00b"} {
		if _, err := resolvePath(bad, "/"); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("resolvePath(%q): %v", bad, err)
		}
	}
}

func TestPermString(t *testing.T) {
	for _, tt := range []struct {
		mode fs.FileMode
		want string
	}{
		{0o644, "-rw-r--r--"},
		{fs.ModeDir | 0o755, "drwxr-xr-x"},
		{fs.ModeDir | fs.ModeSticky | 0o777, "drwxrwxrwt"},
		{fs.ModeDir | fs.ModeSticky | 0o776, "drwxrwxrwT"},
		{fs.ModeSymlink | 0o777, "lrwxrwxrwx"},
		{fs.ModeSetuid | 0o755, "-rwsr-xr-x"},
		{fs.ModeSetuid | fs.ModeSetgid | 0o644, "-rwSr-Sr--"},
		{fs.ModeNamedPipe | 0o600, "prw-------"},
		{fs.ModeSocket | 0o777, "srwxrwxrwx"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "crw-rw-rw-"},
		{fs.ModeDevice | 0o660, "brw-rw----"},
	} {
		if got := permString(tt.mode); got != tt.want {
			t.Errorf("permString(%v) = %q, want %q", tt.mode, got, tt.want)
		}
	}
}

func TestUserDB(t *testing.T) {
	dir := t.TempDir()
	passwd := dir + "/passwd"
	group := dir + "/group"
	write := func(p, s string) {
		t.Helper()
		if err := writeFile(p, s); err != nil {
			t.Fatal(err)
		}
	}
	write(passwd, "root:x:0:0:root:/root:/bin/sh\n# comment\nbroken line\nbad:x:notanumber:1::/:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n")
	write(group, "root:x:0:\nalice:x:1000:\ndocker:x:999:bob,alice\nwheel:x:10:alice\n")
	db := newUserDB(passwd, group)
	type row struct {
		spec       string
		uid, gid   uint32
		home, name string
		groups     int
	}
	// No user is the agent's own: root, or (not root) an id this passwd
	// does not list.
	own := row{"", 0, 0, "/root", "root", 1}
	if euid := uint32(os.Geteuid()); euid != 0 {
		own = row{"", euid, euid, "/", fmt.Sprint(euid), 1}
	}
	for _, tt := range []row{
		own,
		{"root", 0, 0, "/root", "root", 1},
		{"alice", 1000, 1000, "/home/alice", "alice", 3},
		{"1000", 1000, 1000, "/home/alice", "alice", 3},
		{"4242", 4242, 4242, "/", "4242", 1},
	} {
		acc, err := db.lookup(tt.spec)
		if err != nil {
			t.Errorf("lookup(%q): %v", tt.spec, err)
			continue
		}
		if acc.uid != tt.uid || acc.gid != tt.gid || acc.home != tt.home || acc.name != tt.name || len(acc.groups) != tt.groups {
			t.Errorf("lookup(%q) = %+v", tt.spec, acc)
		}
	}
	for _, bad := range []string{"bob", "bad", "4294967295", "-1"} {
		if _, err := db.lookup(bad); err == nil {
			t.Errorf("lookup(%q) found a user", bad)
		}
	}
	if db.userName(1000) != "alice" || db.userName(5) != "5" || db.groupName(999) != "docker" || db.groupName(7) != "7" {
		t.Error("names by id")
	}
	// Changes are picked up. (The rewrite comes later than the first read
	// by more than the file's timestamp granularity, not to synchronise.)
	time.Sleep(10 * time.Millisecond)
	write(passwd, "root:x:0:0:root:/root:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n")
	if acc, err := db.lookup("bob"); err != nil || acc.uid != 1001 || len(acc.groups) != 2 {
		t.Errorf("after change: %+v %v", acc, err)
	}
}

func TestReplayKeepsTailAndOrder(t *testing.T) {
	o := newOutput(&outputMemory{})
	o.publish(streamStdout, []byte("a"))
	o.publish(streamStderr, []byte("B"))
	o.publish(streamStdout, []byte("c"))
	o.publish(streamStdout, []byte("d"))
	s := o.subscribe(true)
	var got []string
	for _, ev := range s.queue {
		got = append(got, string(ev.data))
	}
	if strings.Join(got, "|") != "a|B|cd" {
		t.Errorf("replay %q", got)
	}
	// Past the limit, only the newest replayLimit bytes of a stream stay.
	o = newOutput(&outputMemory{})
	chunk := bytes.Repeat([]byte{'x'}, 100_000)
	for range 30 {
		o.publish(streamStdout, chunk)
	}
	o.publish(streamStdout, []byte("END"))
	o.publish(streamStderr, []byte("err"))
	if n := o.replay[streamStdout].bytes; n != replayLimit {
		t.Errorf("stdout replay holds %d bytes", n)
	}
	var all []byte
	for _, ev := range o.subscribe(true).queue {
		if ev.stream == streamStdout {
			all = append(all, ev.data...)
		}
	}
	if len(all) != replayLimit || !bytes.HasSuffix(all, []byte("END")) {
		t.Errorf("replayed %d bytes", len(all))
	}
	// Tiny alternating writes are bounded by count.
	o = newOutput(&outputMemory{})
	for i := range 3 * replayMaxChunks {
		o.publish(streamID(i%2), []byte{'.'})
	}
	if n := len(o.replay[0].live()); n > replayMaxChunks {
		t.Errorf("%d chunks kept", n)
	}
}

// TestSlowConsumerIsCut: a consumer that stops reading is cut off after the
// stall timeout; another consumer gets everything and the producer goes on.
func TestSlowConsumerIsCut(t *testing.T) {
	o := newOutput(&outputMemory{})
	o.stall = 100 * time.Millisecond
	slow := o.subscribe(false)
	fast := o.subscribe(false)
	const total = 3 * subscriberLimit
	var got int
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			evs, err := fast.next(nil, nil)
			if err != nil {
				t.Errorf("fast consumer: %v", err)
				return
			}
			for _, ev := range evs {
				if ev.end != nil {
					return
				}
				got += len(ev.data)
			}
		}
	})
	chunk := make([]byte, 64<<10)
	start := time.Now()
	for sent := 0; sent < total; sent += len(chunk) {
		o.publish(streamStdout, chunk)
	}
	o.finish(&processpb.ProcessEvent_EndEvent{})
	wg.Wait()
	if got != total {
		t.Errorf("fast consumer got %d of %d bytes", got, total)
	}
	if _, err := slow.next(nil, nil); !errors.Is(err, errTooSlow) {
		t.Errorf("slow consumer: %v, want errTooSlow", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("producer held for %v", took)
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }

// TestOutputBoundedAcrossProcesses: many processes writing to streams whose
// consumers have stopped reading hold a bounded total, not a per-stream
// bound times the number of streams (the agent was OOM-killed that way).
func TestOutputBoundedAcrossProcesses(t *testing.T) {
	var mem outputMemory
	const procs = 40
	outs := make([]*output, procs)
	subs := make([]*subscriber, procs)
	var wg sync.WaitGroup
	for i := range outs {
		outs[i] = newOutput(&mem)
		subs[i] = outs[i].subscribe(false)
		wg.Go(func() {
			for range 200 {
				outs[i].publish(streamStdout, make([]byte, 32<<10))
			}
		})
	}
	held := func() (queued, replay int) {
		for i, o := range outs {
			o.mu.Lock()
			queued += subs[i].held()
			replay += o.replay[0].bytes + o.replay[1].bytes
			o.mu.Unlock()
		}
		return
	}
	// The producers push for half a second, the load under test: what the
	// streams hold must stay bounded however long they push.
	time.Sleep(500 * time.Millisecond)
	queued, replay := held()
	maxQueued := int(max(queueBudget*(1+math.Log(procs)), procs*queueFloor)) + procs*(32<<10+eventOverhead)
	if queued > maxQueued {
		t.Errorf("streams hold %d bytes, over %d", queued, maxQueued)
	}
	if maxReplay := replayBudget + replayLimit + procs*replayFloor; replay > maxReplay {
		t.Errorf("replay logs hold %d bytes, over %d", replay, maxReplay)
	}
	if got := int(mem.replay.Load()); got != replay {
		t.Errorf("account says %d replay bytes, logs hold %d", got, replay)
	}
	// One consumer reading gets its process going again.
	go func() {
		for {
			evs, err := subs[0].next(nil, nil)
			if err != nil || (len(evs) > 0 && evs[len(evs)-1].end != nil) {
				return
			}
		}
	}()
	for _, o := range outs {
		o.finish(&processpb.ProcessEvent_EndEvent{})
	}
	wg.Wait()
	if n := mem.streams.Load(); n != 0 {
		t.Errorf("%d streams still counted after every process ended", n)
	}
	if n := mem.replay.Load(); n != 0 {
		t.Errorf("%d replay bytes of running processes after every process ended", n)
	}
}
