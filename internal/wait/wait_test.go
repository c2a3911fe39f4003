package wait

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records its message and ends
// the goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls For with r in a goroutine of its own, as Fatalf ends it.
func (r *fatalRecorder) run(within time.Duration, cond func() bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		For(r, within, "the thing", cond)
	}()
	<-done
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	r := &fatalRecorder{TB: t}
	calls := 0
	r.run(10*time.Second, func() bool { calls++; return calls == 3 })
	if r.msg != "" || calls != 3 {
		t.Errorf("failed with %q after %d calls, want no failure after 3", r.msg, calls)
	}
}

func TestForFailsNamingWhatItWaitedFor(t *testing.T) {
	r := &fatalRecorder{TB: t}
	start := time.Now()
	r.run(30*time.Millisecond, func() bool { return false })
	if want := "timed out after 30ms waiting for the thing"; r.msg != want {
		t.Errorf("failed with %q, want %q", r.msg, want)
	}
	if took := time.Since(start); took < 30*time.Millisecond || took > 5*time.Second {
		t.Errorf("gave up after %v, want about 30ms", took)
	}
}
