package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	processpb "warren/internal/agent/pb/process"
	"warren/internal/guest"
	"warren/internal/wait"
)

// TestApplyTemplate: the template's env is under Init's, its workdir is a
// process's when it names none, and its start command runs once, tagged,
// however often Init comes.
func TestApplyTemplate(t *testing.T) {
	s := New(Options{}, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { s.Close() })
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	c := guest.TemplateConfig{
		Env:     map[string]string{"FROM_TEMPLATE": "t", "BOTH": "template"},
		Workdir: dir,
		Start:   "echo x >> " + marker + "; sleep 30",
	}
	s.applyTemplate(c, map[string]string{"BOTH": "init"})
	s.applyTemplate(c, map[string]string{"BOTH": "init"})
	wait.For(t, 5*time.Second, "the start command's marker", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	var tagged int
	for _, p := range s.procs.running() {
		if p.tag != nil && *p.tag == StartTag {
			tagged++
		}
	}
	if tagged != 1 {
		t.Errorf("%d processes tagged %s, want 1", tagged, StartTag)
	}
	cfg := &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "pwd; echo $FROM_TEMPLATE $BOTH"}}
	p, sub, ns, err := s.startProcess(&processpb.StartRequest{Process: cfg}, true)
	if err != nil || ns != nil {
		t.Fatalf("start: %v %v", err, ns)
	}
	var out strings.Builder
	for ended := false; !ended; {
		evs, err := sub.next(make(chan struct{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.stream == streamStdout {
				out.Write(ev.data)
			}
			ended = ended || ev.end != nil
		}
	}
	<-p.done
	if got, want := out.String(), dir+"\nt init\n"; got != want {
		t.Errorf("a process without cwd: %q, want %q", got, want)
	}
	if b, _ := os.ReadFile(marker); string(b) != "x\n" {
		t.Errorf("the start command ran %q, want once", b)
	}
}
